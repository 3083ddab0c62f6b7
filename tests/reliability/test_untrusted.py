"""Untrusted files: no loader ever unpickles, and sizes are capped before parsing.

A crafted pickle whose unpickling would create a file is put wherever a
loader looks (``model.safetensors``, ``optimizer.safetensors``,
``trainer_state.safetensors``, a ``pytorch_model.bin`` or ``model.pt`` next to
``config.json``) and handed to every loading entry point, in Python and on the
command line. Each must refuse it naming the file, and the file the payload
would create must never appear.
"""

from __future__ import annotations

import json
import pickle
import re
import shutil
import struct
from pathlib import Path

import pytest
import torch
from reliability_helpers import REPO, cli, snapshot, write_config

from attnkit import checkpoints as ckpt
from attnkit.errors import CheckpointError


class Payload:
    """Unpickling this opens ``path`` for writing, i.e. creates the file: arbitrary code."""

    def __init__(self, path: Path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def raw_pickle(victim: Path) -> bytes:
    return pickle.dumps({"weight": Payload(victim)}, protocol=4)


def torch_save_zip(victim: Path, tmp: Path) -> bytes:
    path = tmp / "payload.zip"
    torch.save({"weight": Payload(victim)}, path)  # the zip format torch.load reads
    data = path.read_bytes()
    path.unlink()
    return data


def test_the_payload_is_live(tmp_path):
    """Sanity check of the test itself: unpickling the payload does create the file."""
    victim = tmp_path / "created_by_unpickling"
    pickle.loads(raw_pickle(victim)).get("weight").close()
    assert victim.exists()


# Where a poisoned file goes: (file name, whether model.safetensors is removed).
PLACES = {
    "model.safetensors": ("model.safetensors", False),
    "optimizer.safetensors": ("optimizer.safetensors", False),
    "trainer_state.safetensors": ("trainer_state.safetensors", False),
    "pytorch_model.bin": ("pytorch_model.bin", True),
    "model.pt": ("model.pt", True),
}


def poison(directory: Path, place: str, data: bytes) -> Path:
    name, remove_model = PLACES[place]
    if remove_model:
        (directory / "model.safetensors").unlink()
    (directory / name).write_bytes(data)
    return directory / name


# -- the Python loaders --------------------------------------------------------------

# name -> (loader taking a checkpoint directory, checkpoint kind, files it opens)
ALL = set(PLACES)
PY_LOADERS = {
    "checkpoint.load_tensors": (
        lambda d: ckpt.load_tensors(d / "model.safetensors"), "translation",
        {"model.safetensors", "pytorch_model.bin", "model.pt"},
    ),
    "checkpoint.load_checkpoint": (ckpt.load_checkpoint, "translation", ALL),
    "checkpoint.average_checkpoints": (
        lambda d: ckpt.average_checkpoints([d, d]), "translation",
        {"model.safetensors", "pytorch_model.bin", "model.pt"},
    ),
    # Loading a model for use never reads the optimizer state.
    "loading.load_model(translation)": (
        ckpt.load_model, "translation", ALL - {"optimizer.safetensors"},
    ),
    "loading.load_tokenizer": (
        ckpt.load_tokenizer, "translation", ALL - {"optimizer.safetensors"},
    ),
    "loading.load_model(lm)": (ckpt.load_model, "lm", ALL - {"optimizer.safetensors"}),
}  # fmt: skip


@pytest.mark.parametrize("fmt", ["pickle", "torch.save"])
@pytest.mark.parametrize("place", list(PLACES))
@pytest.mark.parametrize("loader", list(PY_LOADERS))
def test_python_loaders_never_unpickle(loader, place, fmt, trained, lm_checkpoint, tmp_path):
    load, kind, opens = PY_LOADERS[loader]
    source = trained.checkpoint if kind == "translation" else lm_checkpoint
    directory = tmp_path / "checkpoint"
    shutil.copytree(source, directory)
    victim = tmp_path / "PWNED"
    data = raw_pickle(victim) if fmt == "pickle" else torch_save_zip(victim, tmp_path)
    path = poison(directory, place, data)
    if place not in opens:  # this loader never opens that file: it must load fine
        load(directory)
    else:
        with pytest.raises(CheckpointError, match=re.escape(str(path))) as error:
            load(directory)
        assert "pickle" in str(error.value) or "torch.save" in str(error.value)
    assert not victim.exists()


# -- the command line ----------------------------------------------------------------


def cli_commands(trained, lm: Path, directory: Path, tmp: Path) -> dict[str, list[str]]:
    data, checkpoint = trained.data, str(directory)
    config = write_config(tmp / "tiny.yaml", data, skip_empty=True, max_len=64)
    return {
        "translate": ["translate", "--checkpoint", checkpoint, "--input", str(data / "test.en")],
        "evaluate": ["evaluate", "--checkpoint", str(directory), "--src", str(data / "test.en"),
                     "--ref", str(data / "test.de")],
        "attention": ["attention", "--checkpoint", str(directory), "--text", "one",
                      "--out", str(tmp / "map.png")],
        "average": ["average", "--checkpoints", str(directory), "--out", str(tmp / "avg")],
        "generate": ["generate", "--checkpoint", str(directory), "--max-new-tokens", "2"],
        "train --resume": ["train", "--config", str(config),
                           "--out", str(directory.parents[1]), "--resume", "--no-progress"],
    }  # fmt: skip


CLI_PLACES = ["model.safetensors", "optimizer.safetensors", "trainer_state.safetensors",
              "pytorch_model.bin"]  # fmt: skip
CLI_COMMANDS = ["translate", "evaluate", "attention", "average", "generate", "train --resume"]


@pytest.mark.parametrize("place", CLI_PLACES)
@pytest.mark.parametrize("command", CLI_COMMANDS)
def test_cli_commands_never_unpickle(command, place, trained, lm_checkpoint, tmp_path):
    if command == "generate":
        directory = tmp_path / "lm" / "checkpoint"
        shutil.copytree(lm_checkpoint, directory)
    else:  # a whole run directory, for train --resume; its latest checkpoint
        shutil.copytree(trained.run, tmp_path / "run")
        directory = ckpt.latest_checkpoint(tmp_path / "run")
    victim = tmp_path / "PWNED"
    path = poison(directory, place, raw_pickle(victim))
    argv = cli_commands(trained, lm_checkpoint, directory, tmp_path)[command]
    before = snapshot(tmp_path)

    result = cli(*argv, cwd=tmp_path)

    if place == "optimizer.safetensors" and command != "train --resume":
        # Using or averaging a model never opens its optimizer state: it works, unharmed.
        assert result.returncode == 0, result.stderr
        assert not victim.exists()
        return
    assert result.returncode == 1, result.stderr
    assert result.stderr.count("\n") == 1 and str(path) in result.stderr, result.stderr
    assert "unpickle" in result.stderr or "pickle-based" in result.stderr
    assert not victim.exists()
    assert snapshot(tmp_path) == before


# -- size limits before parsing ------------------------------------------------------


def test_a_huge_safetensors_header_length_is_refused_before_reading(trained, tmp_path):
    directory = tmp_path / "checkpoint"
    shutil.copytree(trained.checkpoint, directory)
    path = directory / "model.safetensors"
    path.write_bytes(struct.pack("<Q", 1 << 62) + b"{}")  # claims a 4 EiB header
    with pytest.raises(CheckpointError) as error:
        ckpt.load_checkpoint(directory)
    message = str(error.value)
    assert str(path) in message and f"{ckpt.MAX_HEADER_BYTES}-byte limit" in message


def test_a_header_longer_than_the_file_is_refused(trained, tmp_path):
    directory = tmp_path / "checkpoint"
    shutil.copytree(trained.checkpoint, directory)
    path = directory / "model.safetensors"
    path.write_bytes(struct.pack("<Q", 1000) + b'{"a": 1}')  # under the cap, past the end
    with pytest.raises(CheckpointError, match=re.escape(str(path)) + ".*truncated"):
        ckpt.load_checkpoint(directory)


@pytest.mark.parametrize("name", list(ckpt.MAX_JSON_BYTES))
def test_oversized_json_files_are_refused_unread(name, trained, tmp_path, monkeypatch):
    directory = tmp_path / "checkpoint"
    shutil.copytree(trained.checkpoint, directory)
    if name == "optimizer.json" and not (directory / name).exists():
        pytest.skip("no optimizer state in this checkpoint")
    path = directory / name
    limit = ckpt.MAX_JSON_BYTES[name]
    with path.open("w") as f:
        f.write("{")
        f.truncate(limit + 1)  # sparse: one byte over the limit, nothing written
    read = Path.read_text
    opened = []

    def watch(self, *args, **kwargs):
        opened.append(self.name)
        return read(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", watch)
    with pytest.raises(CheckpointError) as error:
        ckpt.load_checkpoint(directory)
    assert str(path) in str(error.value) and f"{limit}-byte limit" in str(error.value)
    assert name not in opened  # refused on its size, never read


def test_json_files_under_their_limit_still_load(trained):
    state = ckpt.load_checkpoint(trained.checkpoint)
    assert state.trainer_state["step"] == 2 and json.loads(state.tokenizer_json)


# -- the audit -----------------------------------------------------------------------

UNSAFE = {
    "torch.load(": r"\btorch\.load\(",
    "pickle": r"^\s*(import|from)\s+(c?pickle|dill|joblib)\b|\bpickle\.loads?\(",
    "numpy allow_pickle": r"allow_pickle\s*=\s*True",
    "yaml.load (not safe_load)": r"\byaml\.(load|unsafe_load|full_load)\(|Loader\s*=\s*yaml\.",
    "torch.jit.load(": r"\btorch\.jit\.load\(",
}


def test_no_code_path_can_unpickle():
    """attnkit/ and bench/ hold no torch.load, pickle, allow_pickle or unsafe YAML loader."""
    found = []
    for root in ("attnkit", "bench"):
        for path in sorted((REPO / root).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            for what, pattern in UNSAFE.items():
                for match in re.finditer(pattern, text, flags=re.MULTILINE):
                    line = text.count("\n", 0, match.start()) + 1
                    found.append(f"{path.relative_to(REPO)}:{line}: {what}")
    assert found == []
