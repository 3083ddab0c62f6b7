"""The bad-input catalogue's machinery: a row (``Case``), what its command builder may
use (``Ctx``), ways to break a file, and ``check``, which runs a row.

The rows live in ``test_bad_*.py`` by theme; ``test_bad_input_catalogue.py``
says what every row is checked for.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from reliability_helpers import (
    TrainedRun,
    cli,
    lines,
    snapshot,
    write_config,
    write_corpus,
    write_lines,
)


@dataclass
class Ctx:
    """What a row's command builder may use; it writes its inputs under ``tmp``."""

    tmp: Path
    trained: TrainedRun
    lm: Path

    # -- data and configs ----------------------------------------------------------

    def data(self, **changes: Callable[[Path], object]) -> Path:
        """A good corpus in ``tmp/data`` with some files changed: ``train_en=fn(path)``."""
        directory = write_corpus(self.tmp / "data")
        for name, change in changes.items():
            change(directory / name.replace("_", "."))
        return directory

    def train(self, *extra: str, data: Path | None = None, config: str | None = None) -> list[str]:
        """``attnkit train`` on the tiny config; ``config`` replaces the YAML text."""
        data = data or self.data()
        path = write_config(self.tmp / "tiny.yaml", data, text=config)
        return ["train", "--config", str(path), "--out", str(self.tmp / "out"),
                "--no-progress", *extra]  # fmt: skip

    def yaml(self, old: str, new: str) -> str:
        """The tiny config's text with ``old`` replaced by ``new``."""
        text = write_config(self.tmp / "base.yaml", self.data()).read_text(encoding="utf-8")
        (self.tmp / "base.yaml").unlink()
        assert old in text, old
        return text.replace(old, new)

    def text(self, name: str, content: str | bytes) -> Path:
        path = self.tmp / name
        path.write_bytes(content.encode() if isinstance(content, str) else content)
        return path

    # -- checkpoints ---------------------------------------------------------------

    def checkpoint(self, change: Callable[[Path], object] | None = None) -> Path:
        """A copy of the trained checkpoint in ``tmp/checkpoint``, then ``change(dir)``."""
        directory = self.tmp / "checkpoint"
        shutil.copytree(self.trained.checkpoint, directory)
        if change is not None:
            change(directory)
        return directory

    def run_copy(self, change: Callable[[Path], object] | None = None) -> Path:
        """A copy of the trained run in ``tmp/run``, then ``change(its checkpoint)``."""
        run = self.tmp / "run"
        shutil.copytree(self.trained.run, run)
        if change is not None:
            change(run / "checkpoints" / self.trained.checkpoint.name)
        return run

    def evaluate(self, *extra: str) -> list[str]:
        """``attnkit evaluate`` of the trained checkpoint on copies of the test files."""
        src = write_lines(self.tmp / "test.en", lines("test", 0))
        ref = write_lines(self.tmp / "test.de", lines("test", 1))
        return ["evaluate", "--checkpoint", str(self.trained.checkpoint), "--src", str(src),
                "--ref", str(ref), *extra]  # fmt: skip

    def special(self, kind: str) -> Path:
        """A FIFO, a character device (made with mknod: CI runs as root), a dangling link,
        a directory or a file, at ``tmp/KIND``."""
        path = self.tmp / kind
        if kind == "fifo":
            os.mkfifo(path)
        elif kind == "device":
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # like /dev/null
        elif kind == "dangling":
            path.symlink_to(self.tmp / "nowhere")
        elif kind.endswith("dir.png") or kind == "dir":
            path.mkdir()
        else:
            path.write_text("x\n")
        return path

    def touch(self, name: str) -> list[str]:
        """Create the file ``tmp/NAME``; returns no arguments (for use inside an argv)."""
        (self.tmp / name).write_text("x\n")
        return []

    def translate(self, checkpoint: Path | None = None, *extra: str) -> list[str]:
        source = self.text("in.txt", "one hundred\nforty-two\n")
        return ["translate", "--checkpoint", str(checkpoint or self.trained.checkpoint),
                "--input", str(source), *extra]  # fmt: skip


# -- ways to break a file ------------------------------------------------------------


def drop_last_line(path: Path) -> None:
    write_lines(path, path.read_text(encoding="utf-8").splitlines()[:-1])


def empty_line(number: int) -> Callable[[Path], None]:
    def change(path: Path) -> None:
        text_lines = path.read_text(encoding="utf-8").splitlines()
        text_lines[number - 1] = ""
        write_lines(path, text_lines)

    return change


def bad_utf8(number: int) -> Callable[[Path], None]:
    def change(path: Path) -> None:
        raw = path.read_bytes().split(b"\n")
        raw[number - 1] = b"caf\xe9"  # Latin-1, not UTF-8
        path.write_bytes(b"\n".join(raw))

    return change


def to_dev_zero(path: Path) -> None:
    """A link to /dev/zero, which never ends: read whole, it would fill memory."""
    path.unlink()
    path.symlink_to("/dev/zero")


def make_directory(path: Path) -> None:
    path.unlink()
    path.mkdir()


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def edit_json(name: str, **changes) -> Callable[[Path], None]:
    def change(directory: Path) -> None:
        path = directory / name
        data = json.loads(path.read_text(encoding="utf-8"))
        for key, value in changes.items():
            if callable(value):
                data[key] = value(data[key])
            else:
                data[key] = value
        path.write_text(json.dumps(data), encoding="utf-8")

    return change


def pickle_as(name: str, *, remove_model: bool = False) -> Callable[[Path], None]:
    """Write a ``torch.save`` pickle under ``name`` (and drop model.safetensors if asked)."""

    def change(directory: Path) -> None:
        if remove_model:
            (directory / "model.safetensors").unlink()
        torch.save({"w": torch.zeros(2)}, directory / name)

    return change


def huge_header(directory: Path) -> None:
    # A length prefix claiming a 1 TB JSON header, followed by a plausible "{".
    (directory / "model.safetensors").write_bytes(struct.pack("<Q", 1 << 40) + b'{"a": 1}')


def oversized(name: str, megabytes: int) -> Callable[[Path], None]:
    def change(directory: Path) -> None:
        path = directory / name
        data = json.loads(path.read_text(encoding="utf-8"))
        data["padding"] = "x" * (megabytes << 20)
        path.write_text(json.dumps(data), encoding="utf-8")

    return change


def bigger_vocabulary(directory: Path) -> None:
    path = directory / "tokenizer.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data["pieces"] = data["pieces"] + [f"extra{i}" for i in range(5)]
    path.write_text(json.dumps(data), encoding="utf-8")


@dataclass(frozen=True)
class Case:
    id: str
    argv: Callable[[Ctx], list[str]]
    code: int  # 2: usage or config error; 1: data or checkpoint error at run time
    where: str | Callable[[Ctx], str]  # names the file, line or field
    hint: str  # says what to do, or what is expected


PREPARING = ("preparing ", "reusing ", "trained a ", "encoded ", "  ... ")


def check(case: Case, trained: TrainedRun, lm_checkpoint: Path, tmp_path: Path) -> None:
    """Run ``case`` through the CLI in a child; one stderr line, its exit code, no change."""
    ctx = Ctx(tmp_path, trained, lm_checkpoint)
    argv = case.argv(ctx)
    roots = (tmp_path, trained.root, lm_checkpoint.parent)
    before = snapshot(*roots)

    result = cli(*argv, cwd=tmp_path)

    err = result.stderr
    where = case.where(ctx) if callable(case.where) else case.where
    assert "Traceback" not in err, err
    assert err.count("\n") == 1 and err.endswith("\n") and err.strip(), err
    assert where in err, err
    assert case.hint in err, err
    assert result.returncode == case.code, err
    # Nothing on stdout but the notes of data preparation that began before the input
    # was found bad (its cache lives outside these roots and is never half-written).
    progress = [line for line in result.stdout.splitlines() if not line.startswith(PREPARING)]
    assert progress == [], result.stdout
    assert snapshot(*roots) == before, "the command changed files on disk"
