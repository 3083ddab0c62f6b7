"""Hostile training and decoding input through the real CLI: gzip bombs and huge lines.

Issue 42: a 1 MB ``.gz`` expanding to one 1 GiB line made ``attnkit prepare``
grow to 5.5 GB and die with a Rust backtrace (exit 134). Each command here
runs as a child under a 2 GiB address space and must end with exit 1, at
most 3 lines on stderr naming the file, no traceback, under 10 s of CPU and
under 1 GiB of peak RSS (the issue's targets).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from bounded_helpers import PEAK_RSS, SECONDS, Limited, gzip_bomb, long_line, run_limited
from reliability_helpers import lines, write_lines

DATA = {
    "translation": "src_lang: en, tgt_lang: de, train: {train}, valid: valid, max_len: 64",
    "lm": "text: {train}",
}
CONFIG = """\
task: {task}
data: {{dir: {dir}, %s, loading: {loading}, cache_dir: {cache}}}
tokenizer: {{kind: bpe, vocab_size: 64}}
model: {{preset: small, d_model: 32, num_heads: 2, d_ff: 64, max_len: 128}}
train: {{max_steps: 1, max_tokens: 800}}
"""


@pytest.fixture(scope="module")
def bombs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("bombs")
    gzip_bomb(root / "one-line.gz", b"a")  # the issue's file: 1 MiB -> one 1 GiB line
    record = json.dumps({"src": "a" * 500, "tgt": "b" * 500}).encode() + b"\n"
    gzip_bomb(root / "records.jsonl.gz", record)  # 3 MB -> 1 GiB of 1 KB records
    long_line(root / "long-line")  # 100 MB, no newline
    return root


def prepare(tmp_path: Path, bombs: Path, links: dict[str, str], train: str, **kw) -> Limited:
    data = tmp_path / "data"
    data.mkdir(parents=True)
    for split in ("train", "valid"):
        write_lines(data / f"{split}.en", lines(split, 0))
        write_lines(data / f"{split}.de", lines(split, 1))
    (data / "train.en").unlink()  # train.en.gz is read instead
    for name, target in links.items():
        (data / name).symlink_to(bombs / target)
    config = tmp_path / "run.yaml"
    settings = {"task": "translation", "loading": "prepared", **kw}
    text = CONFIG % DATA[settings["task"]]
    config.write_text(text.format(dir=data, train=train, cache=tmp_path / "cache", **settings))
    return run_limited([sys.executable, "-m", "attnkit", "prepare", "--config", str(config)],
                       cwd=tmp_path)  # fmt: skip


def assert_refused(result: Limited, *needles: str) -> None:
    err = result.stderr
    assert result.returncode in (1, 2), (result.returncode, err[-3000:])
    assert len(result.stderr_lines) <= 3 and "Traceback" not in err, err[-3000:]
    assert all(n in err for n in needles), err
    # CPU time, not wall time: a shared CI machine stretches the wall clock (the
    # wall clock is bounded by run_limited's kill, so a hang fails too).
    assert result.cpu_seconds < SECONDS, f"{result.cpu_seconds:.1f} s of CPU"
    assert 0 < result.peak_rss < PEAK_RSS, f"peak RSS {result.peak_rss / 2**20:.0f} MiB"


def test_prepare_refuses_the_issues_gzip_bomb(tmp_path, bombs) -> None:
    """The exact case of the issue: aligned gzip files, one expanding to one 1 GiB line."""
    result = prepare(tmp_path, bombs, {"train.en.gz": "one-line.gz"}, "train")
    assert_refused(result, "train.en.gz:1: line longer than 1,048,576 bytes",
                   "ATTNKIT_MAX_LINE_BYTES")  # fmt: skip


def test_prepare_refuses_a_gzip_of_a_gigabyte_of_records(tmp_path, bombs) -> None:
    result = prepare(tmp_path, bombs, {"train.jsonl.gz": "records.jsonl.gz"}, "train.jsonl.gz")
    assert_refused(result, "train.jsonl.gz: expands more than 100 times its compressed size",
                   "ATTNKIT_MAX_EXPANSION")  # fmt: skip


def test_a_streamed_corpus_and_an_lm_corpus_refuse_a_100mb_line(tmp_path, bombs) -> None:
    streamed = prepare(tmp_path / "s", bombs, {"train.tsv": "long-line"}, "train.tsv",
                       loading="streaming")  # fmt: skip
    assert_refused(streamed, "train.tsv:1: line longer than 1,048,576 bytes")
    lm = prepare(tmp_path / "lm", bombs, {"input.txt": "long-line"}, "input.txt", task="lm")
    assert_refused(lm, "input.txt:1: line longer than 1,048,576 bytes")


def test_translate_refuses_a_100mb_line_from_a_file_or_a_pipe(tmp_path, bombs, trained) -> None:
    translate = [sys.executable, "-m", "attnkit", "translate", "--checkpoint", str(trained.run)]
    from_file = run_limited([*translate, "--input", str(bombs / "long-line")], cwd=tmp_path)
    assert_refused(from_file, "long-line:1: line longer than 1,048,576 bytes")
    # `gzip -dc bomb.gz | attnkit translate`: the bomb's 1 GiB line through a pipe.
    piped = run_limited(translate, cwd=tmp_path, shell_stdin=f"gzip -dc {bombs / 'one-line.gz'}")
    assert_refused(piped, "<stdin>:1: line longer than 1,048,576 bytes")
