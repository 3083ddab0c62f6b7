"""Image data: the digits split, and the folder + labels CSV reader with its errors."""

from __future__ import annotations

import pytest
import torch

from attnkit.data.images import load_digits_split, read_image_folder, stratified_split
from attnkit.errors import DataError


def test_digits_split_is_fixed_stratified_and_disjoint():
    pytest.importorskip("sklearn")
    train, test = load_digits_split()
    assert (len(train), len(test)) == (1438, 359)
    assert train.images.shape == (1438, 1, 8, 8) and 0 <= train.images.min() <= 1
    assert train.images.max() == 1.0
    # Every class is ~20% held out.
    for c in range(10):
        n_test, n_all = int((test.labels == c).sum()), int((train.labels == c).sum())
        assert abs(n_test / (n_test + n_all) - 0.2) < 0.01
    again, _ = load_digits_split()
    assert torch.equal(again.images, train.images)  # same seed, same split


def test_stratified_split_partitions_the_indices():
    labels = torch.tensor([0] * 10 + [1] * 5 + [2] * 3)
    tr, te = stratified_split(labels, 0.2, seed=1)
    assert sorted(torch.cat([tr, te]).tolist()) == list(range(18))
    assert labels[te].tolist() == [0, 0, 1, 2]  # round(2.0), round(1.0), round(0.6)
    with pytest.raises(ValueError, match="test_fraction"):
        stratified_split(labels, 1.0, seed=0)


def _write_images(folder, sizes):
    from PIL import Image

    for i, (w, h) in enumerate(sizes):
        Image.new("RGB", (w, h), color=(10 * i, 0, 255)).save(folder / f"img{i}.png")


def test_folder_reader_reads_resizes_and_maps_labels(tmp_path):
    pytest.importorskip("PIL")
    _write_images(tmp_path, [(6, 4), (6, 4), (6, 4)])
    (tmp_path / "labels.csv").write_text(
        "filename,label\nimg0.png,cat\nimg1.png,dog\n\nimg2.png,cat\n"
    )
    data = read_image_folder(tmp_path)
    assert data.images.shape == (3, 3, 4, 6) and data.classes == ["cat", "dog"]
    assert data.labels.tolist() == [0, 1, 0]
    assert torch.allclose(data.images[0, 2], torch.ones(4, 6))  # blue channel 255 -> 1.0
    grey = read_image_folder(tmp_path, channels=1, image_size=8)
    assert grey.images.shape == (3, 1, 8, 8)


@pytest.mark.parametrize(
    "csv_text,message",
    [
        ("img0.png,cat\nimg1.png\n", r"labels.csv:2: expected 'filename,label'"),
        ("img0.png,cat\nmissing.png,dog\n", r"labels.csv:2: image 'missing.png' not found"),
        ("img0.png,cat\nbad.png,dog\n", r"labels.csv:2: cannot read image 'bad.png'"),
        (
            "img0.png,cat\nimg2.png,cat\n",
            r"labels.csv:2: 'img2.png' is 5x5, the first image is 4x6",
        ),
        ("\n\n", r"labels.csv: no 'filename,label' lines"),
    ],
)
def test_folder_reader_errors_name_file_and_line(tmp_path, csv_text, message):
    pytest.importorskip("PIL")
    _write_images(tmp_path, [(6, 4), (6, 4), (5, 5)])
    (tmp_path / "bad.png").write_bytes(b"not an image")
    (tmp_path / "labels.csv").write_text(csv_text)
    with pytest.raises(DataError, match=message):
        read_image_folder(tmp_path)


def test_unknown_label_against_given_classes(tmp_path):
    pytest.importorskip("PIL")
    _write_images(tmp_path, [(6, 4)])
    (tmp_path / "labels.csv").write_text("img0.png,bird\n")
    with pytest.raises(DataError, match=r"labels.csv:1: label 'bird' is not one of"):
        read_image_folder(tmp_path, classes=["cat", "dog"])
    with pytest.raises(DataError, match="labels file not found"):
        read_image_folder(tmp_path, tmp_path / "nope.csv")


def test_random_shift_moves_whole_images_with_zero_fill():
    from attnkit.data.images import random_shift

    images = torch.arange(2 * 16, dtype=torch.float32).view(2, 1, 4, 4) + 1
    shifted = random_shift(images, 1, torch.Generator().manual_seed(0))
    for b in range(2):
        padded = torch.nn.functional.pad(images[b, 0], (1, 1, 1, 1))
        crops = [padded[dy : dy + 4, dx : dx + 4] for dy in range(3) for dx in range(3)]
        assert any(torch.equal(shifted[b, 0], c) for c in crops)
    assert random_shift(images, 0, torch.Generator()) is images


def test_read_image_converts_resizes_and_names_a_bad_file(tmp_path):
    from PIL import Image

    from attnkit.data.images import read_image

    Image.new("RGB", (10, 6), color=(255, 0, 0)).save(tmp_path / "a.png")
    image = read_image(tmp_path / "a.png", channels=1, image_size=8)
    assert image.shape == (1, 8, 8) and 0.0 < float(image.max()) <= 1.0
    (tmp_path / "b.png").write_text("not an image")
    with pytest.raises(DataError, match=r"b.png: cannot read image"):
        read_image(tmp_path / "b.png", channels=3, image_size=8)
    with pytest.raises(DataError, match=r"c.png: image not found"):
        read_image(tmp_path / "c.png", channels=3, image_size=8)
