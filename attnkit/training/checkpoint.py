"""Safe, atomic checkpoints: safetensors for tensors, JSON for everything else.

A checkpoint is a directory::

    model.safetensors          model state (tied tensors stored once)
    config.json                the model config (enough to rebuild the model)
    tokenizer.json             optional
    trainer_state.json         optional: step, scheduler, RNG, ... (JSON tree)
    trainer_state.safetensors  the tensors of that tree (e.g. torch RNG states)
    optimizer.json             optional: param_groups and non-tensor state
    optimizer.safetensors      per-parameter state, keys ``state.{idx}.{name}``
    extra.safetensors          optional free-form tensors

Loading never unpickles (principle 11): no ``torch.load``, no ``pickle``. The
files are read and written by ``attnkit.training.safe_files``, which refuses a
pickle or ``torch.save`` zip unread, caps a safetensors header at
``MAX_HEADER_BYTES`` and stores nested state (trainer, optimizer) as JSON trees
with tensor leaves. Each JSON file here has a size limit (``MAX_JSON_BYTES``)
checked before it is read. A pickle-format file (``pytorch_model.bin``,
``model.pt``) found in place of ``model.safetensors`` is named and never opened.

Layout of a run: ``run_dir/checkpoints/step_00001000/`` (``checkpoint_dir``).

Crash safety: a checkpoint is written into a hidden ``.step_N.tmp-*``
directory, every file and the directory are fsynced, and only then is it
renamed to ``step_N`` (and the parent fsynced), so ``step_N`` never names a
half-written checkpoint, whenever the process dies. ``latest_checkpoint``
only sees ``step_N`` names; ``remove_stale_temporaries`` tidies what a killed
run left behind (``--resume`` calls it).
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import tempfile
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from attnkit.errors import CheckpointError
from attnkit.training import safe_files
from attnkit.training.safe_files import MAX_HEADER_BYTES, load_tensors, save_tensors

__all__ = ["MAX_HEADER_BYTES", "load_tensors", "save_tensors"]  # re-exported: file-level API

MODEL_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
TOKENIZER_FILE = "tokenizer.json"
TRAINER_FILE = "trainer_state"  # .json + .safetensors
OPTIMIZER_FILE = "optimizer"  # .json + .safetensors
EXTRA_FILE = "extra.safetensors"

# Size limits of the JSON files, checked before reading: real ones are far smaller
# (a config ~1 KB, a 37k BPE vocabulary ~2 MB, trainer state ~30 KB).
MAX_JSON_BYTES = {
    CONFIG_FILE: 1 << 20,
    TOKENIZER_FILE: 64 << 20,
    f"{TRAINER_FILE}.json": 16 << 20,
    f"{OPTIMIZER_FILE}.json": 16 << 20,
}
_DEFAULT_JSON_LIMIT = 16 << 20
# Which command reads a checkpoint of each model family (for error messages).
FAMILY_COMMANDS = {
    "transformer": "attnkit translate",
    "rnn": "attnkit translate",
    "decoder_only": "attnkit generate",
}
_STEP_DIR = re.compile(r"step_(\d+)")
# Hidden directories a crash may leave beside the checkpoints (see _swap_into_place).
_STALE_DIR = re.compile(r"\.(step_\d+)\.(tmp|old|del)-.*")
# Test hook, inert unless set: "POINT:STEP" makes kill_point(POINT, STEP) SIGKILL the process.
KILL_AT_ENV = "ATTNKIT_TEST_KILL_AT"


def _json_limit(path: Path) -> int:
    return MAX_JSON_BYTES.get(path.name, _DEFAULT_JSON_LIMIT)


def _read_json(path: Path) -> Any:
    return safe_files.read_json(path, _json_limit(path))


def _read_tree(directory: Path, stem: str) -> dict[str, Any] | None:
    return safe_files.read_tree(directory, stem, _json_limit(directory / f"{stem}.json"))


@dataclass
class Checkpoint:
    """A loaded checkpoint directory. Tensors are on the CPU."""

    directory: Path
    model_state: dict[str, Tensor]
    config: dict[str, Any]
    tokenizer_json: str | None = None
    trainer_state: dict[str, Any] | None = None
    optimizer_state: dict[str, Any] | None = None
    extra_tensors: dict[str, Tensor] | None = None


def _optimizer_to_tree(state: Mapping[str, Any]) -> dict[str, Any]:
    # torch keys per-parameter state by int index; JSON keys must be strings.
    return {
        "state": {str(idx): s for idx, s in state["state"].items()},
        "param_groups": state["param_groups"],
    }


def _optimizer_from_tree(tree: dict[str, Any], file: Path) -> dict[str, Any]:
    try:
        return {
            "state": {int(idx): s for idx, s in tree["state"].items()},
            "param_groups": tree["param_groups"],
        }
    except (KeyError, ValueError, AttributeError) as e:
        raise CheckpointError(f"{file}: not an optimizer state ({e})") from e


def _swap_into_place(tmp: Path, target: Path) -> None:
    """Rename the finished ``tmp`` directory to ``target``.

    Crash windows (power loss; a Python error is rolled back):
    - before the first rename: ``target`` untouched, a stale ``.NAME.tmp-*`` remains;
    - old renamed away, new not yet in: ``target`` is missing, the previous
      checkpoint is complete at ``.NAME.old-*`` and the new one at ``.NAME.tmp-*``
      (``latest_checkpoint`` then finds the previous step;
      ``remove_stale_temporaries`` renames the old copy back);
    - after the second rename: ``target`` is the new checkpoint, a stale
      ``.NAME.old-*`` may remain.
    ``target`` never names a half-written directory. Stale dot-directories
    are never picked up by ``latest_checkpoint``.
    """
    parent = target.parent
    if not target.exists():
        os.rename(tmp, target)
        safe_files.fsync_dir(parent)
        return
    old = parent / f".{target.name}.old-{uuid.uuid4().hex[:8]}"
    os.rename(target, old)
    try:
        os.rename(tmp, target)
    except BaseException:
        os.rename(old, target)
        raise
    safe_files.fsync_dir(parent)
    shutil.rmtree(old, ignore_errors=True)


def save_checkpoint(
    directory: str | Path,
    *,
    model_state: Mapping[str, Tensor],
    config: Mapping[str, Any],
    tokenizer_json: str | None = None,
    trainer_state: Mapping[str, Any] | None = None,
    optimizer_state: Mapping[str, Any] | None = None,
    extra_tensors: Mapping[str, Tensor] | None = None,
) -> Path:
    """Write a checkpoint to ``directory`` atomically (replacing one already there).

    Everything is written and fsynced in a hidden temporary directory beside
    ``directory`` (same filesystem), which is then renamed into place; on any
    error the temporary directory is removed and ``directory`` keeps its
    previous contents. ``trainer_state`` may hold tensors (e.g. from
    ``capture_rng_state()``); ``optimizer_state`` is ``optimizer.state_dict()``.
    Returns the directory.
    """
    target = Path(directory)
    try:
        created = not target.parent.is_dir()
        target.parent.mkdir(parents=True, exist_ok=True)
        if created:  # make the new checkpoints/ entry itself durable
            safe_files.fsync_dir(target.parent.parent)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    except OSError as e:
        raise CheckpointError(f"{target}: cannot create checkpoint directory: {e}") from e
    try:
        save_tensors(tmp / MODEL_FILE, model_state)
        safe_files.write_json(tmp / CONFIG_FILE, dict(config))
        match = _STEP_DIR.fullmatch(target.name)
        if match:  # crash tests kill the process here, with half the files written
            kill_point("checkpoint_write", int(match.group(1)))
        if tokenizer_json is not None:
            safe_files.write_text(tmp / TOKENIZER_FILE, tokenizer_json)
        if trainer_state is not None:
            safe_files.write_tree(tmp, TRAINER_FILE, trainer_state)
        if optimizer_state is not None:
            safe_files.write_tree(tmp, OPTIMIZER_FILE, _optimizer_to_tree(optimizer_state))
        if extra_tensors is not None:
            save_tensors(tmp / EXTRA_FILE, extra_tensors)
        safe_files.fsync_dir(tmp)
        _swap_into_place(tmp, target)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise CheckpointError(f"{target}: could not write checkpoint: {e}") from e
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def load_checkpoint(directory: str | Path, *, load_optimizer: bool = True) -> Checkpoint:
    """Read a checkpoint written by ``save_checkpoint``; tensors land on the CPU.

    ``load_optimizer=False`` skips the optimizer state (about twice the model
    size) when only decoding. Raises ``CheckpointError`` naming the bad file.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise CheckpointError(f"{directory}: checkpoint directory not found")
    if not (directory / CONFIG_FILE).exists():
        raise CheckpointError(
            f"{directory / CONFIG_FILE}: file not found; every checkpoint directory holds "
            "the config.json it was saved with (is this an attnkit checkpoint?)"
        )
    config = _read_json(directory / CONFIG_FILE)
    if not isinstance(config, dict):
        raise CheckpointError(f"{directory / CONFIG_FILE}: expected a JSON object")
    model_state = load_tensors(directory / MODEL_FILE)
    tokenizer_path = directory / TOKENIZER_FILE
    tokenizer_json = None
    if tokenizer_path.exists():
        tokenizer_json = safe_files.read_text(tokenizer_path, _json_limit(tokenizer_path))
        safe_files.parse_json(tokenizer_json, tokenizer_path)  # validate; keep the text as written
    optimizer_state = None
    if load_optimizer:
        tree = _read_tree(directory, OPTIMIZER_FILE)
        if tree is not None:
            optimizer_state = _optimizer_from_tree(tree, directory / f"{OPTIMIZER_FILE}.json")
    extra_path = directory / EXTRA_FILE
    return Checkpoint(
        directory=directory,
        model_state=model_state,
        config=config,
        tokenizer_json=tokenizer_json,
        trainer_state=_read_tree(directory, TRAINER_FILE),
        optimizer_state=optimizer_state,
        extra_tensors=load_tensors(extra_path) if extra_path.exists() else None,
    )


def remove_checkpoint(directory: str | Path) -> None:
    """Delete a checkpoint directory: renamed away first, so a crash mid-delete
    never leaves a partial checkpoint under its name. Refuses non-checkpoints."""
    directory = Path(directory)
    if not (directory / CONFIG_FILE).is_file() or not (directory / MODEL_FILE).is_file():
        raise CheckpointError(f"{directory}: not a checkpoint directory; not deleting it")
    trash = directory.parent / f".{directory.name}.del-{uuid.uuid4().hex[:8]}"
    os.rename(directory, trash)
    shutil.rmtree(trash, ignore_errors=True)


# -- run layout ----------------------------------------------------------------------


def checkpoint_dir(run_dir: str | Path, step: int) -> Path:
    """``run_dir/checkpoints/step_00001000`` for step 1000 (zero-padded to 8 digits)."""
    return Path(run_dir) / "checkpoints" / f"step_{step:08d}"


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The highest-step checkpoint under ``run_dir/checkpoints``, or None."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return None
    best: tuple[int, Path] | None = None
    for path in root.iterdir():
        match = _STEP_DIR.fullmatch(path.name)
        if match and path.is_dir():
            step = int(match.group(1))  # numeric: step_100000000 sorts after step_99999999
            if best is None or step > best[0]:
                best = (step, path)
    return None if best is None else best[1]


def remove_stale_temporaries(run_dir: str | Path) -> list[Path]:
    """Tidy the hidden directories a killed run may leave in ``run_dir/checkpoints``.

    ``.step_N.tmp-*`` (a checkpoint being written) and ``.step_N.del-*`` (one
    being deleted) are removed. ``.step_N.old-*`` is the previous copy of a
    checkpoint being replaced: it is renamed back to ``step_N`` if that name is
    missing (the crash hit between the two renames), else removed. Call it
    only when no other process writes to the run. Returns what was removed.
    """
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    removed = []
    for path in sorted(root.iterdir()):
        match = _STALE_DIR.fullmatch(path.name)
        if not match or not path.is_dir():
            continue
        target = root / match.group(1)
        if match.group(2) == "old" and not target.exists():
            os.rename(path, target)
            safe_files.fsync_dir(root)
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def truncate_metrics(path: str | Path, last_step: int) -> list[dict[str, Any]]:
    """Cut a run's ``metrics.jsonl`` back to the records up to ``last_step`` (on resume).

    Blank or torn lines (a kill mid-write) are dropped. The file is rewritten
    through a temporary and a rename; the kept records are returned.
    """
    path = Path(path)
    if not path.exists():
        return []
    kept = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("step", 0) <= last_step:
            kept.append(record)
    tmp = path.with_suffix(".jsonl.tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in kept), encoding="utf-8")
    tmp.replace(path)
    return kept


def kill_point(point: str, step: int) -> None:
    """Test hook: SIGKILL this process when ``ATTNKIT_TEST_KILL_AT`` is ``"{point}:{step}"``.

    ``tests/training/test_crash_resume.py`` uses it to crash at a chosen moment
    (``checkpoint_write``: half-way through writing a checkpoint;
    ``train_step``: after the backward pass, before the update). When the
    variable is unset (always, outside those tests) it does nothing.
    """
    wanted = os.environ.get(KILL_AT_ENV)
    if wanted and wanted == f"{point}:{step}":
        os.kill(os.getpid(), getattr(signal, "SIGKILL", signal.SIGTERM))


# -- checkpoint averaging (§6.1) -----------------------------------------------------


def average_checkpoints(directories: Iterable[str | Path]) -> dict[str, Tensor]:
    """Element-wise mean of the model weights of several checkpoints (§6.1).

    The base model averaged the last 5 checkpoints (10-minute intervals), the
    big model the last 20. Float tensors are summed in fp64 and cast back to
    their dtype; other tensors (integer buffers) are taken from the last
    checkpoint. Tied keys stay tied. Key sets, shapes and dtypes must match.
    """
    directories = [Path(d) for d in directories]
    if not directories:
        raise CheckpointError("average_checkpoints: no checkpoint directories given")
    first = load_tensors(directories[0] / MODEL_FILE)
    sums = {k: t.double() if t.is_floating_point() else t for k, t in first.items()}
    for directory in directories[1:]:
        state = load_tensors(directory / MODEL_FILE)
        _check_same_layout(first, state, directory)
        for key, t in state.items():
            if t.is_floating_point():
                sums[key] += t.double()
            else:
                sums[key] = t
    averaged: dict[str, Tensor] = {}
    by_identity: dict[int, Tensor] = {}  # keep tied keys pointing at one tensor
    for key, t in first.items():
        if id(t) not in by_identity:
            value = sums[key]
            by_identity[id(t)] = (
                (value / len(directories)).to(t.dtype) if t.is_floating_point() else value
            )
        averaged[key] = by_identity[id(t)]
    return averaged


def _check_same_layout(
    reference: Mapping[str, Tensor], state: Mapping[str, Tensor], directory: Path
) -> None:
    missing, unexpected = reference.keys() - state.keys(), state.keys() - reference.keys()
    if missing or unexpected:
        raise CheckpointError(
            f"{directory}: different parameters from the first checkpoint "
            f"(missing {sorted(missing)[:5]}, unexpected {sorted(unexpected)[:5]})"
        )
    for key, t in state.items():
        ref = reference[key]
        if t.shape != ref.shape or t.dtype != ref.dtype:
            raise CheckpointError(
                f"{directory}: {key} is {tuple(t.shape)} {t.dtype}, "
                f"the first checkpoint has {tuple(ref.shape)} {ref.dtype}"
            )


# -- RNG state for bit-exact resume ---------------------------------------------------


def capture_rng_state() -> dict[str, Any]:
    """Every RNG a training step may draw from: torch CPU (and CUDA), ``random``, numpy.

    Torch states are uint8 tensors (stored in safetensors by ``save_checkpoint``);
    the Python and numpy states are plain numbers (stored as JSON).
    """
    np_state = np.random.get_state(legacy=False)
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": {
            "bit_generator": np_state["bit_generator"],
            "key": [int(x) for x in np_state["state"]["key"]],
            "pos": int(np_state["state"]["pos"]),
            "has_gauss": int(np_state["has_gauss"]),
            "gauss": float(np_state["gauss"]),
        },
    }
    if torch.cuda.is_available():
        state["cuda"] = list(torch.cuda.get_rng_state_all())
    return state


def restore_rng_state(state: Mapping[str, Any]) -> None:
    """Undo ``capture_rng_state``. CUDA states restore onto as many devices as
    both sides have (none when resuming a GPU run on the CPU)."""
    try:
        torch.set_rng_state(state["torch"].to("cpu", torch.uint8))
        version, internal, gauss_next = state["python"]
        random.setstate((version, tuple(internal), gauss_next))
        np_state = state["numpy"]
        np.random.set_state(
            {
                "bit_generator": np_state["bit_generator"],
                "state": {
                    "key": np.asarray(np_state["key"], dtype=np.uint32),
                    "pos": np_state["pos"],
                },
                "has_gauss": np_state["has_gauss"],
                "gauss": np_state["gauss"],
            }
        )
    except (KeyError, TypeError, ValueError, RuntimeError) as e:
        raise CheckpointError(f"rng state: cannot restore ({e})") from e
    cuda_states = state.get("cuda") or []
    if cuda_states and torch.cuda.is_available():
        for device, cuda_state in enumerate(cuda_states[: torch.cuda.device_count()]):
            torch.cuda.set_rng_state(cuda_state.to("cpu", torch.uint8), device)


def load_model_state(model: torch.nn.Module, state: Mapping[str, Tensor], *, source: Path) -> None:
    """Strictly load ``state`` into ``model``; a mismatch raises ``CheckpointError``.

    A vocabulary or width mismatch shows up as a shape difference; a checkpoint
    of another architecture as missing/unexpected keys.
    """
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise CheckpointError(
            f"{source}: does not fit the model its {CONFIG_FILE} describes: missing "
            f"{missing[:4]}, unexpected {unexpected[:4]}; the weights and {CONFIG_FILE} "
            "come from different models"
        )
    for key, value in state.items():
        if value.shape != expected[key].shape:
            raise CheckpointError(
                f"{source}: {key} has shape {tuple(value.shape)} but the model built from "
                f"{CONFIG_FILE} expects {tuple(expected[key].shape)}; the weights and "
                f"{CONFIG_FILE} come from different models (another size or vocabulary)"
            )
    model.load_state_dict(state, strict=True)


def family_hint(config: Mapping[str, Any], accepted: Iterable[str]) -> str:
    """A hint to append to a loader's error when ``config.json`` is of another family.

    ``"; this is a decoder_only checkpoint: use attnkit generate"`` when the
    config's ``family`` is not in ``accepted`` but another command reads it
    (e.g. a GPT-style checkpoint given to ``attnkit translate``), else ``""``.
    """
    family = config.get("family") if isinstance(config, Mapping) else None
    if not isinstance(family, str) or family in accepted:
        return ""
    command = FAMILY_COMMANDS.get(family)
    return f"; this is a {family} checkpoint: use {command}" if command else ""
