"""Progress on a terminal is tqdm's bar; in a file or pipe, a few plain lines (no
carriage-return frames), with the time left."""

from __future__ import annotations

import io
import subprocess
import sys

from attnkit.progress import LineProgress, progress


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_file_gets_a_line_every_five_percent():
    out = io.StringIO()
    bar = progress(1000, unit="step", file=out)
    assert isinstance(bar, LineProgress)
    for _ in range(1000):
        bar.update(1)
    bar.set_postfix(loss="1.234")
    bar.close()
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue()
    assert 19 <= len(lines) <= 22, lines
    assert lines[0].startswith("step 50/1,000 (5%)") and "left" in lines[0]
    assert lines[-1].startswith("step 1,000/1,000 (100%)")


def test_messages_go_to_standard_output_as_tqdm_writes_them(capsys):
    progress(10, file=io.StringIO()).write("a message")
    progress(10, disable=True).write("another")
    assert capsys.readouterr().out == "a message\nanother\n"


def test_bytes_and_a_restart():
    out = io.StringIO()
    bar = progress(4 << 20, unit="B", unit_scale=True, desc="train.gz", file=out)
    bar.update(1 << 20)
    bar.reset(total=8 << 20)
    bar.update(8 << 20)
    bar.close()
    text = out.getvalue()
    assert "train.gz: 1.0MB/4.0MB (25%)" in text and "8.0MB/8.0MB (100%)" in text


def test_a_terminal_gets_the_bar_and_disable_shows_nothing():
    from tqdm.auto import tqdm

    bar = progress(10, file=_Tty())
    assert isinstance(bar, tqdm)
    bar.close()
    silent = progress(10, disable=True)
    silent.update(5)
    silent.close()


def test_a_training_run_logged_to_a_file_has_few_lines(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "attnkit", "quickstart", "--max-steps", "60", "--train-size",
         "1200", "--test-size", "10", "--out", str(tmp_path / "q")],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "\r" not in done.stderr
    steps = [line for line in done.stderr.splitlines() if line.startswith("step ")]
    assert 1 <= len(steps) <= 22, done.stderr
