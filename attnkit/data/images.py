"""Image classification data: scikit-learn's digits, and a folder of images with a labels CSV.

* ``load_digits_split``: the 1,797 8x8 grey digits that ship inside the
  scikit-learn wheel (no download), scaled to ``[0, 1]``, with a fixed,
  seeded, stratified held-out split. With the defaults (``test_fraction=0.2``,
  ``seed=0``) that is 1,438 training and 359 held-out images, the same 359
  on every machine (the split is ours, not scikit-learn's, so its version
  cannot move it).
* ``load_lfw_subset``: scikit-image's bundled ``lfw_subset`` (no download):
  100 faces and 100 non-faces from Labeled Faces in the Wild, 25x25 grey,
  resized to the model's size; classes "face", "non_face".
* ``read_image_folder``: ``labels.csv`` lines ``filename,label`` (an optional
  ``filename,label`` header) naming images in a folder; read with Pillow,
  converted to grey or RGB, optionally resized. Every problem is one
  ``DataError`` naming the file and line.
* ``read_image``: one image file, converted and resized for a model.
* ``random_shift``: light augmentation, each image moved by up to a few
  pixels with zero fill (from a given generator, so a run resumes exactly).

Shapes: ``N`` images, ``C`` channels, ``H``/``W`` size.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from attnkit.data.readers import read_lines
from attnkit.errors import DataError


@dataclass
class ImageSet:
    """``images`` float ``(N, C, H, W)`` in ``[0, 1]``, ``labels`` long ``(N,)``, class names."""

    images: Tensor
    labels: Tensor
    classes: list[str]

    def __len__(self) -> int:
        return self.labels.numel()

    def subset(self, index: Tensor) -> ImageSet:
        return ImageSet(self.images[index], self.labels[index], self.classes)


def stratified_split(labels: Tensor, test_fraction: float, seed: int) -> tuple[Tensor, Tensor]:
    """Indices ``(train, test)``: each class gives ``round(n_c * test_fraction)`` to test.

    Seeded and independent of any library's splitter; both index sets are sorted.
    """
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction: must be in (0, 1), got {test_fraction}")
    g = torch.Generator().manual_seed(seed)
    train, test = [], []
    for c in torch.unique(labels).tolist():
        idx = (labels == c).nonzero().squeeze(1)
        idx = idx[torch.randperm(idx.numel(), generator=g)]
        n_test = int(round(idx.numel() * test_fraction))
        test.append(idx[:n_test])
        train.append(idx[n_test:])
    return torch.cat(train).sort().values, torch.cat(test).sort().values


def random_shift(images: Tensor, max_shift: int, generator: torch.Generator) -> Tensor:
    """Move each image ``(N, C, H, W)`` by up to ``max_shift`` pixels each way, zero-filled.

    Offsets are drawn from ``generator`` (two draws of ``N`` per call, on the CPU).
    """
    if max_shift == 0:
        return images
    n, c, h, w = images.shape
    padded = torch.nn.functional.pad(images, (max_shift,) * 4)
    dy = torch.randint(0, 2 * max_shift + 1, (n,), generator=generator).to(images.device)
    dx = torch.randint(0, 2 * max_shift + 1, (n,), generator=generator).to(images.device)
    rows = (dy[:, None] + torch.arange(h, device=images.device))[:, None, :, None]  # (N,1,H,1)
    cols = (dx[:, None] + torch.arange(w, device=images.device))[:, None, None, :]  # (N,1,1,W)
    batch = torch.arange(n, device=images.device)[:, None, None, None]
    chan = torch.arange(c, device=images.device)[None, :, None, None]
    return padded[batch, chan, rows, cols]


def load_digits_set() -> ImageSet:
    """All 1,797 of scikit-learn's digits, ``(N, 1, 8, 8)`` in ``[0, 1]``, classes "0".."9"."""
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise DataError("digits: needs scikit-learn (pip install scikit-learn)") from None
    digits = load_digits()
    images = torch.tensor(digits.images, dtype=torch.float32)[:, None] / 16.0  # pixels 0..16
    labels = torch.tensor(digits.target, dtype=torch.long)
    return ImageSet(images, labels, [str(i) for i in range(10)])


def load_lfw_subset(image_size: int = 25) -> ImageSet:
    """scikit-image's 200 LFW crops (100 faces, then 100 non-faces), ``(200, 1, S, S)``.

    Resized (bilinear, antialiased) from 25x25 to ``image_size`` when they differ.
    """
    try:
        from skimage.data import lfw_subset
    except ImportError:
        raise DataError("lfw_subset: needs scikit-image (pip install scikit-image)") from None
    images = torch.tensor(lfw_subset(), dtype=torch.float32)[:, None]  # already in [0, 1]
    if image_size != images.size(-1):
        images = torch.nn.functional.interpolate(
            images, size=(image_size, image_size), mode="bilinear", antialias=True,
            align_corners=False,
        ).clamp(0.0, 1.0)  # fmt: skip
    labels = torch.cat([torch.zeros(100, dtype=torch.long), torch.ones(100, dtype=torch.long)])
    return ImageSet(images, labels, ["face", "non_face"])


def load_digits_split(test_fraction: float = 0.2, seed: int = 0) -> tuple[ImageSet, ImageSet]:
    """scikit-learn's digits as ``(train, test)`` ``ImageSet``s of ``(N, 1, 8, 8)`` images."""
    data = load_digits_set()
    train, test = stratified_split(data.labels, test_fraction, seed)
    return data.subset(train), data.subset(test)


def _label_rows(labels_file: Path) -> list[tuple[int, str, str]]:
    """``(line number, filename, label)`` for each data line of the CSV."""
    if not labels_file.exists():
        raise DataError(f"{labels_file}: labels file not found")
    rows = []
    for lineno, row in enumerate(csv.reader(read_lines(labels_file, check_empty=False)), start=1):
        if not row or all(not cell.strip() for cell in row):
            continue
        if len(row) != 2 or not row[0].strip() or not row[1].strip():
            raise DataError(f"{labels_file}:{lineno}: expected 'filename,label', got {row!r}")
        name, label = row[0].strip(), row[1].strip()
        if lineno == 1 and (name.lower(), label.lower()) == ("filename", "label"):
            continue  # header
        rows.append((lineno, name, label))
    if not rows:
        raise DataError(f"{labels_file}: no 'filename,label' lines")
    return rows


def read_image_folder(
    folder: str | Path,
    labels_file: str | Path | None = None,
    *,
    channels: int = 3,
    image_size: int | tuple[int, int] | None = None,
    classes: list[str] | None = None,
) -> ImageSet:
    """Images named in a labels CSV (default ``folder/labels.csv``).

    Args:
        channels: 1 (grey) or 3 (RGB); every image is converted.
        image_size: resize every image to it (``(H, W)`` or a square side);
            ``None`` requires all images to have the first image's size.
        classes: the label names in id order (e.g. the training set's, so a
            test folder maps labels the same way); default sorted labels found.
    """
    try:
        from PIL import UnidentifiedImageError
    except ImportError:
        raise DataError("read_image_folder: needs Pillow (pip install pillow)") from None
    if channels not in (1, 3):
        raise ValueError(f"channels: expected 1 or 3, got {channels}")
    folder = Path(folder)
    labels_path = folder / "labels.csv" if labels_file is None else Path(labels_file)
    rows = _label_rows(labels_path)
    names = sorted({label for _, _, label in rows}) if classes is None else list(classes)
    index = {name: i for i, name in enumerate(names)}
    size = (image_size, image_size) if isinstance(image_size, int) else image_size

    images: list[Tensor] = []
    labels: list[int] = []
    for lineno, name, label in rows:
        where = f"{labels_path}:{lineno}"
        if label not in index:
            raise DataError(f"{where}: label {label!r} is not one of the classes {names}")
        try:
            pixels = _load_pixels(folder / name, channels, size)
        except FileNotFoundError:
            raise DataError(f"{where}: image {name!r} not found in {folder}") from None
        except (UnidentifiedImageError, OSError) as e:
            raise DataError(f"{where}: cannot read image {name!r} ({e})") from None
        if images and pixels.shape != images[0].shape:
            hw, first = tuple(pixels.shape[1:]), tuple(images[0].shape[1:])
            raise DataError(
                f"{where}: {name!r} is {hw[0]}x{hw[1]}, the first image is "
                f"{first[0]}x{first[1]}; pass image_size= to resize"
            )
        images.append(pixels)
        labels.append(index[label])
    return ImageSet(
        torch.stack(images).float() / 255.0, torch.tensor(labels, dtype=torch.long), names
    )


def _load_pixels(path: Path, channels: int, size: tuple[int, int] | None) -> Tensor:
    """``(C, H, W)`` uint8 pixels of one image file, converted (and resized if ``size``)."""
    from PIL import Image

    with Image.open(path) as opened:
        img = opened.convert("L" if channels == 1 else "RGB")
        if size is not None:
            img = img.resize((size[1], size[0]), Image.Resampling.BILINEAR)
        pixels = torch.frombuffer(bytearray(img.tobytes()), dtype=torch.uint8)
        return pixels.view(img.height, img.width, channels).permute(2, 0, 1)


def read_image(path: str | Path, *, channels: int, image_size: int) -> Tensor:
    """One image file as ``(C, H, W)`` floats in ``[0, 1]``, converted and resized to a square.

    A missing or unreadable file is one ``DataError`` naming it.
    """
    try:
        from PIL import UnidentifiedImageError
    except ImportError:
        raise DataError("read_image: needs Pillow (pip install pillow)") from None
    if channels not in (1, 3):
        raise ValueError(f"channels: expected 1 or 3, got {channels}")
    try:
        pixels = _load_pixels(Path(path), channels, (image_size, image_size))
    except FileNotFoundError:
        raise DataError(f"{path}: image not found") from None
    except (UnidentifiedImageError, OSError) as e:
        raise DataError(f"{path}: cannot read image ({e})") from None
    return pixels.float() / 255.0
