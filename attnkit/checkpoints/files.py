"""Safe, atomic checkpoint directories: safetensors for tensors, JSON for everything else.

A checkpoint is a directory::

    model.safetensors          model state (tied tensors stored once)
    config.json                the model config (enough to rebuild the model)
    tokenizer.json             optional
    trainer_state.json         optional: step, scheduler, RNG, ... (JSON tree)
    trainer_state.safetensors  the tensors of that tree (e.g. torch RNG states)
    optimizer.json             optional: param_groups and non-tensor state
    optimizer.safetensors      per-parameter state, keys ``state.{idx}.{name}``

Loading never unpickles (principle 11): no ``torch.load``, no ``pickle``. The
files are read and written by ``attnkit.checkpoints.safe_files``, which refuses
a pickle or ``torch.save`` zip unread, caps a safetensors header at
``MAX_HEADER_BYTES`` and stores nested state (trainer, optimizer) as JSON trees
with tensor leaves. Each JSON file here has a size limit (``MAX_JSON_BYTES``)
checked before it is read. A pickle-format file (``pytorch_model.bin``,
``model.pt``) found in place of ``model.safetensors`` is named and never opened.

Crash safety: a checkpoint is written into a hidden ``.step_N.tmp-*``
directory, every file and the directory are fsynced, and only then is it
renamed to ``step_N`` (and the parent fsynced), so ``step_N`` never names a
half-written checkpoint, whenever the process dies. Where checkpoints live
in a run, and tidying what a killed run left, is ``attnkit.checkpoints.rundir``.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import Tensor

from attnkit.checkpoints import safe_files
from attnkit.checkpoints.safe_files import load_tensors, save_tensors
from attnkit.errors import CheckpointError
from attnkit.models.checkpoint_keys import upgrade_state_dict
from attnkit.output_paths import describe_os_error, fsync_dir, make_temporary_dir, swap_directory

MODEL_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
TOKENIZER_FILE = "tokenizer.json"
TRAINER_FILE = "trainer_state"  # .json + .safetensors
OPTIMIZER_FILE = "optimizer"  # .json + .safetensors

# Size limits of the JSON files, checked before reading: real ones are far smaller
# (a config ~1 KB, a 37k BPE vocabulary ~2 MB, trainer state ~30 KB).
MAX_JSON_BYTES = {
    CONFIG_FILE: 1 << 20,
    TOKENIZER_FILE: 64 << 20,
    f"{TRAINER_FILE}.json": 16 << 20,
    f"{OPTIMIZER_FILE}.json": 16 << 20,
}
_DEFAULT_JSON_LIMIT = 16 << 20


def _json_limit(path: Path) -> int:
    return MAX_JSON_BYTES.get(path.name, _DEFAULT_JSON_LIMIT)


def _read_json(path: Path) -> object:
    return safe_files.read_json(path, _json_limit(path))


def _read_tree(directory: Path, stem: str) -> dict[str, object] | None:
    what = {OPTIMIZER_FILE: "an optimizer state", TRAINER_FILE: "a trainer state"}.get(stem)
    return safe_files.read_tree(
        directory, stem, _json_limit(directory / f"{stem}.json"), what or f"a {stem} tree"
    )


@dataclass
class Checkpoint:
    """A loaded checkpoint directory. Tensors are on the CPU."""

    directory: Path
    model_state: dict[str, Tensor]
    config: dict[str, object]
    tokenizer_json: str | None = None
    trainer_state: dict[str, Any] | None = None
    optimizer_state: dict[str, object] | None = None


def _optimizer_to_tree(state: Mapping[str, Any]) -> dict[str, Any]:
    # torch keys per-parameter state by int index; JSON keys must be strings.
    return {
        "state": {str(idx): s for idx, s in state["state"].items()},
        "param_groups": state["param_groups"],
    }


def _optimizer_from_tree(tree: object, file: Path) -> dict[str, object]:
    if not isinstance(tree, dict):
        raise CheckpointError(
            f"{file}: not an optimizer state (a JSON {type(tree).__name__}, not an object)"
        )
    try:
        groups = tree["param_groups"]
        if not isinstance(groups, list) or not all(isinstance(g, dict) for g in groups):
            raise ValueError("param_groups must be a list of objects")
        return {"state": {int(idx): s for idx, s in tree["state"].items()}, "param_groups": groups}
    except (KeyError, ValueError, AttributeError, TypeError) as e:
        raise CheckpointError(f"{file}: not an optimizer state ({e})") from e


def save_checkpoint(
    directory: str | Path,
    *,
    model_state: Mapping[str, Tensor],
    config: Mapping[str, object],
    tokenizer_json: str | None = None,
    trainer_state: Mapping[str, object] | None = None,
    optimizer_state: Mapping[str, object] | None = None,
    during_write: Callable[[], None] | None = None,
    extra_files: Mapping[str, str] | None = None,
) -> Path:
    """Write a checkpoint to ``directory`` atomically (replacing one already there).

    Everything is written and fsynced in a hidden temporary directory beside
    ``directory`` (same filesystem), which is then renamed into place; on any
    error the temporary directory is removed and ``directory`` keeps its
    previous contents. ``trainer_state`` may hold tensors (e.g. from
    ``capture_rng_state()``); ``optimizer_state`` is ``optimizer.state_dict()``.
    ``during_write`` is called half-way (weights and config written, the rest
    not), for tests that crash a write there. ``extra_files`` (name -> text)
    are written beside the rest (a LoRA run's ``adapter.json``). Returns the directory.
    """
    target = Path(directory)
    try:
        created = not target.parent.is_dir()
        target.parent.mkdir(parents=True, exist_ok=True)
        if created:  # make the new checkpoints/ entry itself durable
            fsync_dir(target.parent.parent)
        tmp = make_temporary_dir(target)
    except OSError as e:
        raise CheckpointError(
            f"{target}: cannot create checkpoint directory ({describe_os_error(e)})"
        ) from e
    try:
        save_tensors(tmp / MODEL_FILE, model_state)
        safe_files.write_json(tmp / CONFIG_FILE, dict(config))
        if during_write is not None:  # crash tests kill the process here
            during_write()
        if tokenizer_json is not None:
            safe_files.write_text(tmp / TOKENIZER_FILE, tokenizer_json)
        for name, text in (extra_files or {}).items():
            safe_files.write_text(tmp / name, text)
        if trainer_state is not None:
            safe_files.write_tree(tmp, TRAINER_FILE, trainer_state)
        if optimizer_state is not None:
            safe_files.write_tree(tmp, OPTIMIZER_FILE, _optimizer_to_tree(optimizer_state))
        fsync_dir(tmp)
        swap_directory(tmp, target)  # crash windows: see attnkit.output_paths.swap_directory
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise CheckpointError(
            f"{target}: could not write checkpoint ({describe_os_error(e)}); "
            "the previous checkpoints are intact"
        ) from e
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
    # Keys of earlier attnkit versions become today's, for every reader of the checkpoint.
    model_state = dict(upgrade_state_dict(load_tensors(directory / MODEL_FILE)))
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
    return Checkpoint(
        directory=directory,
        model_state=model_state,
        config=config,
        tokenizer_json=tokenizer_json,
        trainer_state=_read_tree(directory, TRAINER_FILE),
        optimizer_state=optimizer_state,
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
