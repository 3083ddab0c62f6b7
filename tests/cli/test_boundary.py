"""The CLI's one error boundary: every exception is one stderr line and the right exit code."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import tiny_checkpoint
from safetensors import SafetensorError

from attnkit.cli import average as average_cmd
from attnkit.cli.boundary import describe, run_command
from attnkit.cli.main import main
from attnkit.errors import ConfigError

REPO = Path(__file__).parents[2]


@pytest.mark.parametrize(
    "error,words,code",
    [
        (ConfigError("train.lr: must be > 0"), "train.lr: must be > 0", 2),
        (OSError(errno.ENOSPC, "No space left on device", "/o/x"), "/o/x: no space left", 1),
        (OSError(errno.EROFS, "Read-only file system", "/o"), "/o: read-only file system", 1),
        (OSError(errno.EXDEV, "Invalid cross-device link", "/a", None, "/b"), "/a -> /b", 1),
        (MemoryError(), "out of memory", 1),
        (RuntimeError("[enforce fail] DefaultCPUAllocator: can't allocate memory"), "out of", 1),
        (UnicodeEncodeError("ascii", "\u00fc", 0, 1, "no"), "PYTHONIOENCODING=utf-8", 1),
        (UnicodeDecodeError("utf-8", b"\xff", 0, 1, "bad"), "not valid utf-8 (byte 0)", 1),
        (RecursionError(), "nested too deeply", 1),
        (OverflowError("int too big"), "too large (int too big)", 1),
        (SafetensorError("I/O error: No space left on device (os error 28)"),
         "safetensors (No space left on device)", 1),
        (KeyError("surprise"), "unexpected KeyError", 1),
        # pathlib's Path.resolve() on a link loop before Python 3.13
        (RuntimeError("Symlink loop from '/o/loop'"), "/o/loop: a symbolic link loop", 1),
    ],
)  # fmt: skip
def test_every_exception_becomes_one_line_and_an_exit_code(error, words, code, capsys):
    def command():
        raise error

    assert run_command("x", command, debug=False) == code
    err = capsys.readouterr().err
    assert err.startswith("attnkit x: error: ") and err.count("\n") == 1, err
    assert words in err
    assert describe(error)[1] == code


def test_debug_shows_the_traceback_instead():
    with pytest.raises(OverflowError):
        run_command("x", lambda: int(float("inf")), debug=True)


def test_a_multi_line_message_is_folded_into_one(capsys):
    def command():
        raise RuntimeError("first\nsecond\n\nthird")

    run_command("x", command, debug=False)
    assert capsys.readouterr().err.count("\n") == 1


def test_a_full_disk_during_average_is_one_line_and_nothing_half_written(
    tmp_path, capsys, monkeypatch
):
    """safetensors reports a full disk as its own error type: still one line, and the
    previous --out survives whole, with no temporary left beside it."""
    checkpoint = tiny_checkpoint(tmp_path / "ck")
    out = tmp_path / "avg"
    out.mkdir()
    (out / "config.json").write_text("{}")

    def full(*args, **kwargs):
        raise SafetensorError('Error while serializing: I/O error: No space left on device '
                              '(os error 28) at path "x"')  # fmt: skip

    import safetensors.torch

    monkeypatch.setattr(safetensors.torch, "save_file", full)
    code = main(["average", "--checkpoints", str(checkpoint), "--out", str(out), "--overwrite"])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1, err
    assert str(out) in err and "no space left on device" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["avg", "ck"]
    assert sorted(p.name for p in out.iterdir()) == ["config.json"]


def test_an_unexpected_error_in_a_command_is_one_line(tmp_path, capsys, monkeypatch):
    def broken(args):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(average_cmd, "run", broken)
    assert main(["average", "--run", str(tmp_path), "--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unexpected ZeroDivisionError" in err and "--debug" in err


def _cli(*argv: str, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", **kwargs.pop("env", {})}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    return subprocess.Popen([sys.executable, "-m", "attnkit", *argv], env=env,
                            stderr=subprocess.PIPE, text=True, **kwargs)  # fmt: skip


def test_a_reader_that_goes_away_is_no_error_and_no_noise(tmp_path):
    """`attnkit translate ... | head -0`: the pipe breaks at the first write; no traceback,
    no "Exception ignored" at exit, exit code 1."""
    checkpoint = tiny_checkpoint(tmp_path / "ck")
    (tmp_path / "in.txt").write_text("one two\n" * 200)
    read, write = os.pipe()
    os.close(read)  # the reader is gone before anything is written
    proc = _cli("translate", "--checkpoint", str(checkpoint), "--input", str(tmp_path / "in.txt"),
                "--greedy", "--max-len-b", "2", stdout=write)  # fmt: skip
    os.close(write)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 1
    assert err == ""


def test_closed_stdout_and_an_unencodable_stdout_are_one_line(tmp_path):
    checkpoint = tiny_checkpoint(tmp_path / "ck")
    argv = ["translate", "--checkpoint", str(checkpoint), "--input", os.devnull]
    closed = _cli(*argv, stdout=subprocess.DEVNULL, preexec_fn=lambda: os.close(1))
    _, err = closed.communicate(timeout=300)
    assert closed.returncode == 1 and err.count("\n") == 1 and "standard output is closed" in err
    (tmp_path / "in.txt").write_text("one\n")
    ascii_out = _cli("fill-mask", "--checkpoint", str(checkpoint), "--text", "\u00fc",
                     stdout=subprocess.PIPE, env={"PYTHONIOENCODING": "ascii"})  # fmt: skip
    _, err = ascii_out.communicate(timeout=300)
    assert ascii_out.returncode in (1, 2) and err.count("\n") == 1 and "Traceback" not in err
