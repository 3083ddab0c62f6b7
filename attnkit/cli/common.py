"""Pieces the subcommands share: run directories, devices, loading checkpoints."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attnkit.errors import UsageError

if TYPE_CHECKING:
    from torch import Tensor

    from attnkit.checkpoints.loading import LoadedModel
    from attnkit.data.images import ImageSet

# Which commands read a checkpoint of each kind of model (attnkit.models.FAMILIES's
# `kind`): the loader refuses other kinds, and its error names the right commands.
KIND_COMMANDS: dict[str, tuple[str, ...]] = {
    "seq2seq": ("translate", "evaluate", "attention", "serve", "explore"),
    "causal_lm": ("generate", "evaluate", "attention", "serve", "explore"),
    "masked_lm": ("fill-mask", "classify", "evaluate", "attention", "serve", "explore"),
    "image_classifier": ("evaluate", "attention"),
}


def load_for(command: str, path: str | Path, device: str | None = None) -> LoadedModel:
    """Load the checkpoint at ``path`` for ``attnkit command``: a family that command
    does not read is a one-line error naming the commands that do."""
    from attnkit.checkpoints.loading import WrongFamilyError, load_model

    kinds: list[Any] = [kind for kind, commands in KIND_COMMANDS.items() if command in commands]
    try:
        return load_model(path, device, kinds=kinds)
    except WrongFamilyError as e:
        others = [f"attnkit {c}" for c in KIND_COMMANDS[e.family.kind]]
        raise type(e)(f"{e}; use {', '.join(others[:-1])} or {others[-1]}", e.family) from None


def add_device_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--device",
        default="auto",
        help="cpu, cuda, cuda:1, ... (default: auto = cuda if available, else cpu)",
    )


def add_precision_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--precision",
        default="fp32",
        choices=("fp32", "bf16", "int8", "int8w"),
        help="CPU inference weights: fp32 (default; oneDNN-packed, same results to float "
        "rounding), bf16 (AVX512-BF16 GEMMs), int8 (per-channel weights, dynamic "
        "activations; fastest, smallest; inaccurate on Llama-type models, whose activations "
        "have outliers), int8w (int8 weights, bf16 activations: small and accurate on those "
        "models). bf16/int8/int8w change results: see the README",
    )


def apply_precision(model: Any, precision: str, *, path: str = "fast") -> Any:
    """``model`` converted for ``--precision`` in place (``attnkit.quantize``); returns it.

    fp32 packs the weights on the fast CPU path only: ``--no-fast`` (the
    reference path) and ``--compile`` keep the plain ``nn.Linear`` modules.
    On a GPU only fp32 exists (the packed and int8 kernels are CPU kernels).
    """
    from attnkit.quantize import quantize_model

    on_cpu = all(p.device.type == "cpu" for p in model.parameters())
    if not on_cpu:
        if precision != "fp32":
            raise UsageError(f"--precision {precision}: CPU kernels; add --device cpu")
        return model
    if precision == "fp32" and path != "fast":
        return model
    if path == "compiled":
        raise UsageError(f"--precision {precision}: not with --compile (use one or the other)")
    return quantize_model(model, precision)


def check_out_dir(out: Path, *, resume: bool = False, overwrite: bool = False) -> None:
    """Raise ``UsageError`` unless ``prepare_out_dir`` may use ``out``; changes nothing.

    Call it before any slow work (reading data, training a tokenizer), so a
    wrong ``--out`` fails at once, and ``prepare_out_dir`` only once every
    other check has passed, so a failed command leaves the disk as it was.
    """
    if resume and overwrite:
        raise UsageError("--resume and --overwrite: choose one")
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out}: exists and is not a directory; choose another --out")
    if resume:
        from attnkit.checkpoints.rundir import latest_checkpoint

        if latest_checkpoint(out) is None:
            also = "" if not out.is_dir() or not any(out.iterdir()) else " and --overwrite"
            raise UsageError(
                f"--resume: {out} holds nothing to resume (no checkpoints/step_*); "
                f"start a new run without --resume{also}"
            )
    elif out.is_dir() and any(out.iterdir()) and not overwrite:
        raise UsageError(
            f"{out}: already holds an earlier run; pass --resume to continue it "
            "or --overwrite to replace it (or choose another --out)"
        )


def prepare_out_dir(out: Path, *, resume: bool = False, overwrite: bool = False) -> None:
    """Make sure ``out`` may be written: never silently replace an earlier run."""
    check_out_dir(out, resume=resume, overwrite=overwrite)
    if out.is_dir() and any(out.iterdir()) and overwrite:
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)


# -- images for an image classifier (evaluate --images, attention --image) -------------

DIGITS = "digits"


def _class_names(config: Any) -> list[str]:
    return list(config.class_names) or [str(i) for i in range(config.num_classes)]


def images_for(spec: str, labels: str | None, config: Any) -> tuple[ImageSet, str]:
    """``--images``: ``digits`` (the held-out 359 of the fixed split) or a folder with a
    labels CSV (``--labels``, default ``FOLDER/labels.csv``), read for ``config``'s
    channels and size, labels mapped through its class names. Returns the set and a name."""
    from attnkit.data.images import load_digits_split, read_image_folder

    if spec == DIGITS:
        if labels is not None:
            raise UsageError("--labels: the digits carry their own labels; remove it")
        _check_digits_fit(config)
        return load_digits_split()[1], "digits (held out)"
    folder = Path(spec)
    if not folder.is_dir():
        raise UsageError(f"--images {spec}: not a folder (nor 'digits')")
    images = read_image_folder(
        folder,
        labels,
        channels=config.channels,
        image_size=config.image_size,
        classes=_class_names(config),
    )
    return images, str(folder)


def image_for(spec: str, config: Any) -> tuple[Tensor, int | None, str]:
    """``--image``: ``digits:INDEX`` (a held-out digit) or an image file, as ``(C, H, W)``
    for ``config``; returns the image, its label id (``None`` for a file) and a name."""
    from attnkit.data.images import load_digits_split, read_image

    if spec.startswith(f"{DIGITS}:"):
        _check_digits_fit(config)
        held_out = load_digits_split()[1]
        text = spec.partition(":")[2]
        if not text.lstrip("-").isdigit() or not 0 <= int(text) < len(held_out):
            raise UsageError(
                f"--image {spec}: expected digits:INDEX with INDEX in 0..{len(held_out) - 1}"
            )
        i = int(text)
        return held_out.images[i], int(held_out.labels[i]), f"held-out digit {i}"
    return read_image(spec, channels=config.channels, image_size=config.image_size), None, spec


def _check_digits_fit(config: Any) -> None:
    if (config.image_size, config.channels) != (8, 1):
        raise UsageError(
            f"digits: 8x8 grey images, but this model reads {config.image_size}x"
            f"{config.image_size} with {config.channels} channels; give a folder or file"
        )
