"""Untidy but valid input is accepted: CRLF, a BOM, over-long and empty lines.

Also: ``--debug`` turns the one-line errors back into tracebacks.
"""

from __future__ import annotations

import builtins
import json
import os
import subprocess
import sys
from pathlib import Path

from reliability_helpers import (
    REPO,
    _limit_address_space,
    cli,
    lines,
    snapshot,
    write_config,
    write_lines,
)

from attnkit.cli.main import main


def test_training_data_with_crlf_and_bom_is_read_clean(trained):
    # trained: train.en has CRLF endings and train.de a BOM (see conftest).
    assert (trained.data / "train.en").read_bytes().count(b"\r\n") > 0
    assert (trained.data / "train.de").read_bytes().startswith(b"\xef\xbb\xbf")
    pieces = json.loads((trained.checkpoint / "tokenizer.json").read_text(encoding="utf-8"))
    text = json.dumps(pieces, ensure_ascii=False)
    assert "\r" not in text and "\\r" not in text  # no CR reached the tokenizer
    assert "\ufeff" not in text and "\\ufeff" not in text  # nor the BOM
    assert trained.stderr == ""  # a clean run prints nothing on stderr (--no-progress)


def test_overlong_training_pairs_are_dropped_and_counted(trained):
    assert "1 longer than data.max_len=64 dropped" in trained.stdout


def test_empty_pairs_are_skipped_and_counted_with_skip_empty(trained):
    assert "1 with an empty side skipped (data.skip_empty)" in trained.stdout


def test_translate_strips_crlf_and_bom_from_its_input(trained, tmp_path):
    source = tmp_path / "in.txt"
    write_lines(source, ["one hundred", "forty-two", "seven"], newline="\r\n", bom=True)
    from_file = cli("translate", "--checkpoint", str(trained.run), "--input", str(source),
                    "--greedy", cwd=tmp_path)  # fmt: skip
    assert from_file.returncode == 0, from_file.stderr
    assert from_file.stderr == ""
    assert "\r" not in from_file.stdout and "\ufeff" not in from_file.stdout
    assert from_file.stdout.count("\n") == 3
    # The same bytes on stdin give the same translations.
    from_stdin = cli("translate", "--checkpoint", str(trained.run), "--greedy", cwd=tmp_path,
                     stdin=source.read_bytes().decode("utf-8"))  # fmt: skip
    assert from_stdin.returncode == 0, from_stdin.stderr
    assert from_stdin.stdout == from_file.stdout


def test_translate_truncates_an_overlong_line_with_one_warning(trained, tmp_path):
    source = tmp_path / "in.txt"
    write_lines(source, ["one", "nine hundred ninety-nine " * 20, "two"])  # 500 chars > 127
    result = cli("translate", "--checkpoint", str(trained.checkpoint), "--input", str(source),
                 "--greedy", "--max-len-b", "5", cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("\n") == 3  # still one output line per input line
    assert result.stderr.count("\n") == 1
    assert "1 input line(s)" in result.stderr and "in.txt:2" in result.stderr
    assert "truncated" in result.stderr and "Traceback" not in result.stderr


def test_evaluate_skips_empty_pairs_with_skip_empty(trained, tmp_path):
    src = write_lines(tmp_path / "t.en", ["one", "", *lines("test", 0)], newline="\r\n")
    ref = write_lines(tmp_path / "t.de", ["eins", "null", *lines("test", 1)], bom=True)
    result = cli("evaluate", "--checkpoint", str(trained.checkpoint), "--src", str(src),
                 "--ref", str(ref), "--skip-empty", "--greedy", "--json", cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stderr == "attnkit evaluate: warning: skipped 1 pair(s) with an empty side\n"
    assert json.loads(result.stdout)["sentences"] == 1 + len(lines("test", 0))


def test_debug_shows_the_traceback(trained, tmp_path):
    argv = ["translate", "--checkpoint", str(tmp_path / "nope")]
    plain = cli(*argv, cwd=tmp_path, stdin="one\n")
    assert plain.returncode == 1 and "Traceback" not in plain.stderr
    for debug in (["--debug", *argv], [*argv, "--debug"]):
        result = cli(*debug, cwd=tmp_path, stdin="one\n")
        assert result.returncode != 0
        assert "Traceback (most recent call last)" in result.stderr
        assert "CheckpointError" in result.stderr and "nope" in result.stderr


def test_an_unreadable_data_file_is_one_line_and_changes_nothing(
    trained, tmp_path, monkeypatch, capsys
):
    """Permission denied (root reads any file, so the denial is simulated in-process)."""
    data = tmp_path / "data"
    data.mkdir()
    for name in ("train.en", "train.de", "valid.en", "valid.de"):
        (data / name).write_bytes((trained.data / name).read_bytes())
    config = write_config(tmp_path / "tiny.yaml", data, max_len=64, skip_empty=True)
    denied = data / "train.en"
    real = Path.read_bytes

    real_open = builtins.open

    def read_bytes(self):
        if self == denied:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self)

    def open_file(file, *args, **kwargs):  # the prepared-data readers open files themselves
        if isinstance(file, str | Path) and Path(file) == denied:
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    before = snapshot(tmp_path)
    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    monkeypatch.setattr(builtins, "open", open_file)
    code = main(["train", "--config", str(config), "--out", str(tmp_path / "out"), "--no-progress"])
    monkeypatch.undo()
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1, err
    assert f"{denied}: permission denied" in err and "permissions" in err
    assert snapshot(tmp_path) == before


def test_dev_zero_on_standard_input_is_one_line(trained, tmp_path):
    """``attnkit translate < /dev/zero`` (and classify's standard input): read whole, it
    would fill memory; refused unread, exit 1 (under the tests' address-space limit)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    with open("/dev/zero", "rb") as zero:
        result = subprocess.run(
            [sys.executable, "-m", "attnkit", "translate", "--checkpoint", str(trained.run)],
            stdin=zero, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
            preexec_fn=_limit_address_space,
        )  # fmt: skip
    assert result.returncode == 1 and result.stdout == "", result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert "<stdin>: is a character device, not text" in result.stderr
