"""Pieces the subcommands share: run directories, devices, loading checkpoints."""

from __future__ import annotations

import argparse
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attnkit.errors import UsageError

if TYPE_CHECKING:
    import torch
    from torch import Tensor

    from attnkit.checkpoints.loading import LoadedModel
    from attnkit.data.images import ImageSet
    from attnkit.models.config_base import ModelConfig
    from attnkit.models.lm_config import EncoderOnlyConfig
    from attnkit.models.swin import SwinConfig
    from attnkit.models.vit import ViTConfig
    from attnkit.output_paths import RunLock

# Which commands read a checkpoint of each kind of model (attnkit.models.FAMILIES's
# `kind`): the loader refuses other kinds, and its error names the right commands.
# fmt: off
KIND_COMMANDS: dict[str, tuple[str, ...]] = {
    "seq2seq": ("translate", "summarize", "evaluate", "attention", "serve", "explore"),
    "causal_lm": ("generate", "summarize", "evaluate", "attention", "serve", "explore"),
    "masked_lm": (
        "fill-mask",
        "classify",
        "embed",
        "tag",
        "answer",
        "evaluate",
        "attention",
        "serve",
        "explore",
    ),  # fmt: skip
    "image_classifier": ("evaluate", "attention"),
}
# fmt: on


CHECKPOINT_HELP = (
    "checkpoint or run directory, or hf:ORG/NAME[@REVISION] (a Hugging Face Hub model, "
    "imported once into attnkit's cache)"
)


def named_checkpoint(path: str) -> str:
    """A checkpoint option's value as a local path: ``hf:ORG/NAME[@REVISION]`` (a model on
    the Hugging Face Hub) is imported once into attnkit's cache and its run directory
    returned (``attnkit.interop.hub.imports``); any other value comes back as given.
    Every command that takes a checkpoint calls this first (tests/cli/test_named_checkpoints)."""
    if not path.startswith("hf:"):
        return path
    from attnkit.interop.hub.imports import local_checkpoint

    return local_checkpoint(path)


def pinned_checkpoint(directory: str) -> str:
    """How a run records a checkpoint that ``named_checkpoint`` imported from the Hub:
    ``hf:ORG/NAME@COMMIT``, the commit it was imported at."""
    from attnkit.interop.hub.imports import pinned_name

    return pinned_name(directory)


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


def checkpoint_inputs(path: str | Path) -> list[Path]:
    """The checkpoint directory ``path`` names (a run's latest), as an input of the
    output-path policy: no output may be written inside it. Empty when it cannot be
    found (loading it then fails with its own message)."""
    from attnkit.checkpoints.rundir import resolve_checkpoint
    from attnkit.errors import CheckpointError

    try:
        return [resolve_checkpoint(path)]
    except (CheckpointError, OSError):
        return []


def add_set_argument(parser: argparse.ArgumentParser) -> None:
    """``--set SECTION.KEY=VALUE`` (repeatable) into ``args.overrides``, for run configs."""
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key, e.g. --set train.max_steps=1000 (repeatable)",
    )


def add_device_argument(parser: argparse.ArgumentParser) -> None:
    from attnkit.cli.argtypes import device

    parser.add_argument(
        "--device",
        type=device,
        default="auto",
        help="cpu, cuda, cuda:1, ... (default: auto = cuda if available, else cpu)",
    )


class _PrecisionGiven(argparse.Action):
    """Stores ``--precision`` and notes that it was given: left out, a checkpoint stored
    as int4 blocks runs as int4 (``args.precision_from_checkpoint``; ``inference_args``)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, values)
        namespace.precision_from_checkpoint = False


def add_precision_argument(parser: argparse.ArgumentParser) -> None:
    parser.set_defaults(precision_from_checkpoint=True)
    parser.add_argument(
        "--precision",
        default="fp32",
        action=_PrecisionGiven,
        choices=("fp32", "bf16", "int8", "int8w", "int4"),
        help="CPU inference weights: fp32 (default; oneDNN-packed or plain MKL linears, "
        "whichever this machine runs faster: timed once per model, then cached), "
        "bf16 (AVX512-BF16 GEMMs), int8 (per-channel weights, dynamic "
        "activations; fastest, smallest; a language model is first calibrated on built-in "
        "text for SmoothQuant, which moves its activation outliers into the weights, ~1 s), "
        "int8w (int8 weights, bf16 activations), int4 (4-bit weights in groups of 32, "
        "ATTNKIT_INT4_GROUP=32|64|128 to change; bf16 activations; smallest; a language "
        "model can be calibrated for activation-aware scales, AWQ, with ATTNKIT_INT4_AWQ=1; "
        "the default "
        "for a checkpoint stored as GGUF blocks: import --from gguf --keep-quantized). "
        "bf16/int8/int8w/int4 change results: see the README",
    )


def label_names(config: EncoderOnlyConfig) -> list[str]:
    """A classifier checkpoint's label names (``0``, ``1``, ... where it has none)."""
    return list(config.label_names) or [str(i) for i in range(config.num_labels)]


# What attnkit itself writes at the top of a run directory (train, quickstart, import):
# --overwrite empties a directory holding only these, never one with other files in it.
RUN_ENTRIES = frozenset(
    {".attnkit.lock", "run.json", "metrics.jsonl", "metrics.jsonl.tmp", "loss.png",
     "checkpoints", "tensorboard", "quickstart.json", "metrics.json", "attention.png",
     "import.json", "config.json", "model.safetensors", "tokenizer.json",
     "trainer_state.json", "trainer_state.safetensors", "optimizer.json",
     "optimizer.safetensors", "engines"}
)  # fmt: skip


def foreign_entries(out: Path) -> list[str]:
    """Names in ``out`` that no attnkit command writes there (sorted)."""
    return sorted(p.name for p in out.iterdir() if p.name not in RUN_ENTRIES)


def _holds_files(out: Path) -> bool:
    """Whether ``out`` holds anything besides the run lock (a killed run may leave that)."""
    from attnkit.output_paths.runlock import LOCK_FILE

    return out.is_dir() and any(p.name != LOCK_FILE for p in out.iterdir())


def check_out_dir(
    out: Path,
    *,
    resume: bool = False,
    overwrite: bool = False,
    inputs: Sequence[str | Path] = (),
    checkpoints: Sequence[str | Path] = (),
    resumable: bool = True,
) -> None:
    """Raise ``UsageError`` unless ``open_run_dir`` may use ``out``; changes nothing.

    Call it before any slow work (reading data, training a tokenizer), so a
    wrong ``--out`` fails at once, and ``open_run_dir`` only once every other
    check has passed, so a failed command leaves the disk as it was
    (``resumable=False``: the command has no ``--resume`` to suggest). The
    output-path policy (``attnkit.output_paths``) applies: ``out`` must be a
    directory or new, and with ``--overwrite`` must not hold one of ``inputs``
    (the config, the data), which emptying it would delete; a new run must not
    lie inside one of ``checkpoints`` (``--init``'s).
    """
    from attnkit.output_paths import check_output_dir

    if resume and overwrite:
        raise UsageError("--resume and --overwrite: choose one")
    check_output_dir(out, option="--out", inputs=inputs if overwrite else (),
                     checkpoints=() if resume else checkpoints)  # fmt: skip
    if resume:
        from attnkit.checkpoints.rundir import latest_checkpoint

        if latest_checkpoint(out) is None:
            also = " and --overwrite" if _holds_files(out) else ""
            raise UsageError(
                f"--resume: {out} holds nothing to resume (no checkpoints/step_*); "
                f"start a new run without --resume{also}"
            )
    elif _holds_files(out) and not overwrite:
        resume_it = "--resume to continue it or " if resumable else ""
        raise UsageError(
            f"{out}: already holds an earlier run; pass {resume_it}--overwrite to replace it "
            "(or choose another --out)"
        )
    elif overwrite and out.is_dir() and foreign_entries(out):
        names = foreign_entries(out)
        more = ", ..." if len(names) > 3 else ""
        raise UsageError(
            f"--out {out}: holds files that are not an attnkit run ({', '.join(names[:3])}"
            f"{more}); --overwrite replaces only a run, so choose another --out"
        )


def lock_run_dir(out: Path) -> RunLock | None:
    """Lock ``out`` now if it holds a lock file, so a second run on it is refused at once
    (naming the holder's PID) rather than after its data is read; ``None`` if there is
    none yet (``open_run_dir`` creates it). The lock is taken without writing the PID
    and without creating a file: a command refused before ``open_run_dir`` changes
    nothing in ``out`` (``RunLock.announce`` writes the PID once it goes ahead)."""
    from attnkit.output_paths import RunLock
    from attnkit.output_paths.runlock import LOCK_FILE

    if not out.is_dir() or not (out / LOCK_FILE).is_file():
        return None
    return RunLock(out).acquire(announce=False)


def open_run_dir(
    out: Path,
    *,
    resume: bool = False,
    overwrite: bool = False,
    inputs: Sequence[str | Path] = (),
    checkpoints: Sequence[str | Path] = (),
    lock: RunLock | None = None,
    resumable: bool = True,
) -> RunLock:
    """Create ``out``, lock it for this process, and with ``overwrite`` empty it.

    The lock (``attnkit.output_paths.RunLock``) is taken before anything in
    ``out`` changes and is held until the process ends, so ``--overwrite``
    cannot delete the checkpoints of a run that is still going. Emptying keeps
    the lock file itself: a new file of the same name would be a second lock.
    With ``resume`` the PID is not yet written (``RunLock.announce``): the
    caller announces once the checkpoint to resume from has been accepted.
    """
    from attnkit.output_paths import RunLock
    from attnkit.output_paths.runlock import LOCK_FILE

    check_out_dir(out, resume=resume, overwrite=overwrite, inputs=inputs,
                  checkpoints=checkpoints, resumable=resumable)  # fmt: skip
    if lock is None:
        out.mkdir(parents=True, exist_ok=True)
        lock = RunLock(out).acquire(announce=not resume)
    if not resume:  # a resume may still be refused (its checkpoint); it announces itself
        lock.announce()
    if overwrite:
        for entry in out.iterdir():
            if entry.name == LOCK_FILE:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    return lock


def check_training_fits(
    model_config: ModelConfig, device: str | torch.device, *, batch_tokens: int = 0
) -> None:
    """Refuse (naming the keys) a model whose weights, gradients and Adam moments alone
    would not fit in memory, or a batch of ``batch_tokens`` (language models sample
    ``train.max_tokens`` worth of blocks whatever the text's length) whose token ids and
    first hidden states alone would not, before anything is allocated."""
    from attnkit.memory_estimates import model_bytes, require
    from attnkit.models import build_model

    weights = model_bytes(model_config, build_model, prefix="model.")
    require(
        None if weights is None else 4 * weights,
        "the model section (weights, gradients and Adam state)",
        device=device,
    )
    d_model = getattr(model_config, "d_model", 1)
    require(batch_tokens * (8 + 4 * d_model), f"train.max_tokens={batch_tokens}: one batch",
            device=device)  # fmt: skip


def check_decode_fits(
    model_config: ModelConfig, rows: int, device: str | torch.device, options: str
) -> None:
    """Refuse a decode whose logits alone (``rows`` = beams x sentences per batch, by the
    vocabulary, twice: the scores and their log-softmax) would not fit in memory."""
    from attnkit.memory_estimates import require

    vocab: int = getattr(model_config, "tgt_vocab_size", 0) or getattr(
        model_config, "vocab_size", 0
    )
    vocab = max(vocab, 1)
    require(2 * 4 * rows * vocab, f"{options}: decoding", device=device, error=UsageError)


def check_input_file(path: str | None, option: str) -> None:
    """Refuse a device as an input file (``/dev/zero`` never ends: reading it would fill
    memory); a terminal, a pipe and ``/dev/null`` are fine. Missing files are the
    readers' to report."""
    from attnkit.data.readers import endless_device

    kind = None if path is None else endless_device(path)
    if kind is not None:
        raise UsageError(f"{option} {path}: is a {kind} device, not a text file")


# -- images for an image classifier (evaluate --images, attention --image) -------------

DIGITS = "digits"


def _class_names(config: ViTConfig | SwinConfig) -> list[str]:
    return list(config.class_names) or [str(i) for i in range(config.num_classes)]


def images_for(
    spec: str, labels: str | None, config: ViTConfig | SwinConfig
) -> tuple[ImageSet, str]:
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


def image_for(spec: str, config: ViTConfig | SwinConfig) -> tuple[Tensor, int | None, str]:
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


def _check_digits_fit(config: ViTConfig | SwinConfig) -> None:
    if (config.image_size, config.channels) != (8, 1):
        raise UsageError(
            f"digits: 8x8 grey images, but this model reads {config.image_size}x"
            f"{config.image_size} with {config.channels} channels; give a folder or file"
        )
