"""Bounded reading: a line ceiling, a gzip expansion ceiling, linear reading, for every reader.

The unit tests use small ceilings (``ATTNKIT_MAX_LINE_BYTES``, a lowered
``EXPANSION_FLOOR``); the hostile-input tests run every reader on a 1 GiB
one-line gzip, a gzip of 1 GiB of lines and a 100 MB line, in a child
process under an address-space and a time limit.
"""

from __future__ import annotations

import gzip
import io
import json
import re
import sys
import time
from pathlib import Path

import pytest
from bounded_helpers import PEAK_RSS, SECONDS, gzip_bomb, long_line, run_limited

from attnkit.data import bounded
from attnkit.data.readers import read_document, read_input_lines, read_lines, read_text
from attnkit.data.tokenizers import BPETokenizer
from attnkit.errors import DataError, UsageError


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
    return path


@pytest.mark.parametrize("block", [4, 7, 64, 1 << 22])
def test_the_line_ceiling_names_the_line_whatever_the_blocks(tmp_path, monkeypatch, block):
    monkeypatch.setenv(bounded.LINE_ENV, "10")
    monkeypatch.setattr(bounded, "BLOCK_BYTES", block)
    ok = b"0123456789\n" * 3 + b"\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\n"  # 10 bytes each
    assert read_lines(write(tmp_path / "ok.txt", ok))[-1] == "ééééé"
    assert read_lines(write(tmp_path / "last.txt", ok + b"0123456789"))[-1] == "0123456789"
    for name, data, line in [
        ("mid.txt", ok + b"01234567890\n" + ok, 5),
        ("first.txt", b"01234567890\n" + ok, 1),
        ("end.txt.gz", ok + b"0123456789" * 50, 5),  # the last line, no newline
        ("crlf.txt", ok + b"0123456789\r\n", 5),  # the ceiling counts the line's bytes
    ]:
        with pytest.raises(DataError, match=rf"^\S*{name}:{line}: line longer than 10 bytes"):
            read_lines(write(tmp_path / name, data))
        with pytest.raises(DataError, match=rf"{name}:{line}: line longer"):
            read_text(tmp_path / name)


def test_reading_stops_as_soon_as_the_ceiling_is_passed(monkeypatch) -> None:
    """An endless line costs one block past the ceiling, not the whole input."""

    class Endless:
        served = 0

        def read(self, n: int) -> bytes:
            self.served += n
            return b"x" * n

    monkeypatch.setenv(bounded.LINE_ENV, str(3 << 20))
    monkeypatch.setattr(bounded, "BLOCK_BYTES", 1 << 20)
    endless = Endless()
    with pytest.raises(DataError, match=r"<pipe>:1: line longer than 3,145,728 bytes"):
        list(bounded.line_blocks("<pipe>", endless))
    assert endless.served == 4 << 20


def test_reading_a_long_line_is_linear_in_its_length(monkeypatch) -> None:
    """The unfinished line is carried as pieces and joined once: eight times the line
    costs about eight times the time (re-copying the growing buffer on every block, as
    the readers once did, costs sixty-four times)."""

    class Line:
        def __init__(self, size: int):
            self.left = size

        def read(self, n: int) -> bytes:
            n = min(n, self.left)
            self.left -= n
            return b"x" * n

    monkeypatch.setenv(bounded.LINE_ENV, str(128 << 20))
    monkeypatch.setattr(bounded, "BLOCK_BYTES", 16 << 10)

    def seconds(size: int) -> float:
        best = float("inf")
        for _ in range(3):
            # CPU time of this process: other processes on a busy machine do not count
            start = time.process_time()
            (_, text), *_ = bounded.decoded_blocks("<line>", Line(size))
            best = min(best, time.process_time() - start)
            assert len(text) == size
        return best

    # eight times the line: ~8x the time if linear, ~64x if quadratic; 24x leaves room
    # for page faults and a busy machine's caches (4x at a bound of 8x was flaky)
    assert seconds(64 << 20) < 24 * seconds(8 << 20)


def test_a_gzip_that_expands_past_the_ratio_is_refused(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(bounded, "EXPANSION_FLOOR", 1 << 20)
    bomb = write(tmp_path / "bomb.txt.gz", b"all work and no play\n" * 200_000)  # 4 MB, ~600x
    with pytest.raises(DataError, match=r"bomb\.txt\.gz: expands more than 100 times its comp"):
        read_lines(bomb)
    monkeypatch.setenv(bounded.EXPANSION_ENV, "5000")  # the documented way out
    assert len(read_lines(bomb)) == 200_000
    # Ordinary text (about 3x) is far below the ratio; small files never count.
    words = [f"w{i * 7919 % 100_003}" for i in range(400_000)]
    text = "".join(" ".join(words[i : i + 20]) + "\n" for i in range(0, len(words), 20))
    monkeypatch.delenv(bounded.EXPANSION_ENV)
    assert len(read_lines(write(tmp_path / "text.gz", text.encode()))) == 20_000
    monkeypatch.setattr(bounded, "EXPANSION_FLOOR", 64 << 20)
    assert len(read_lines(bomb)) == 200_000


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"not gzip at all\n", r"x\.txt\.gz: not a valid gzip file"),
        (gzip.compress(b"one\ntwo\n" * 1000)[:-20], r"x\.txt\.gz: not a valid gzip file"),
    ],
)
def test_a_bad_or_truncated_gzip_is_one_line(tmp_path, data, message) -> None:
    (tmp_path / "x.txt.gz").write_bytes(data)
    with pytest.raises(DataError, match=message):
        read_lines(tmp_path / "x.txt.gz")


@pytest.mark.parametrize("value", ["0", "-3", "1MB", "nan"])
def test_a_bad_ceiling_in_the_environment_is_a_usage_error(tmp_path, monkeypatch, value):
    monkeypatch.setenv(bounded.LINE_ENV, value)
    with pytest.raises(UsageError, match=rf"ATTNKIT_MAX_LINE_BYTES: expected a positive.*{value}"):
        read_lines(write(tmp_path / "x.txt", b"a\n"))


def test_utf8_errors_name_the_line_and_the_byte_of_the_file(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(bounded, "BLOCK_BYTES", 8)
    path = write(tmp_path / "x.txt", b"abc\n" * 5 + b"ab\xffc\n")
    with pytest.raises(DataError, match=r"x\.txt:6: not valid UTF-8 \(byte 22\)"):
        read_lines(path)


def test_standard_input_has_the_same_ceiling(monkeypatch) -> None:
    monkeypatch.setenv(bounded.LINE_ENV, "10")  # "\ufeffshort\r" is 9 bytes
    monkeypatch.setattr("sys.stdin", io.StringIO("\ufeffshort\r\nfar too long\n"))
    with pytest.raises(DataError, match=r"^<stdin>:2: line longer than 10 bytes"):
        read_input_lines(None)
    monkeypatch.setattr("sys.stdin", io.StringIO("\ufeffshort\r\nfine\r\n"))
    assert read_input_lines(None) == ["short", "fine"]
    monkeypatch.setattr("sys.stdin", None)  # `attnkit translate <&-`
    with pytest.raises(DataError, match=r"^<stdin>: standard input is closed"):
        read_input_lines(None)


def test_a_tokenizer_json_on_one_long_line_is_not_a_corpus(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(bounded.LINE_ENV, "64")
    doc = json.dumps({"vocab": {f"piece{i}": i for i in range(100)}})
    assert json.loads(read_document(write(tmp_path / "t.json", doc.encode()))) is not None


def test_the_bpe_trainer_never_gets_a_text_over_the_ceiling(monkeypatch) -> None:
    """HF's trainer aborts the process (Rust allocation failure) on a huge text."""
    monkeypatch.setenv(bounded.LINE_ENV, "100")
    with pytest.raises(DataError, match=r"tokenizer training: text 2 is 101 characters"):
        BPETokenizer.train(["a b c", "x" * 101], 40)
    assert BPETokenizer.train(iter(["a b c", "x" * 100]), 40).vocab_size > 4


# -- every reader on hostile input, in a child under limits --------------------------

READERS = {
    "read_lines (plain or gzip)": "read_lines(D / ('h' + gz))",
    "read_text (LM corpora)": "read_text(D / ('h' + gz))",
    "aligned pairs": "read_pairs(pair_inputs(D, 'h', 'de', 'en'), skip_empty=False)",
    "TSV pairs": "read_pairs(pair_inputs(D, 'h.tsv' + gz, 'de', 'en'), skip_empty=False)",
    "JSONL pairs": "read_pairs(pair_inputs(D, 'h.jsonl' + gz, 'de', 'en'), skip_empty=False)",
    "LM text pieces": "list(iter_text_pieces(text_inputs(D, 'h' + gz)))",
    "tokenizer sample (prepare)": "train_on_text(text_inputs(D, 'h' + gz), Settings())",
    "streaming corpus": "next(iter(stream(pair_inputs(D, 'h.tsv' + gz, 'de', 'en'))))",
    "standard input": "read_input_lines(None)",
}

CHILD = """
import sys, time
from pathlib import Path
from attnkit.data import bounded
from attnkit.data.formats import pair_inputs, read_pairs, text_inputs, iter_text_pieces
from attnkit.data.prepared import train_on_text
from attnkit.data.readers import read_input_lines, read_lines, read_text
from attnkit.data.streaming import PairStream
from attnkit.data.tokenizers import CharTokenizer
from attnkit.errors import DataError

class Settings:
    kind, vocab_size, sample_size = "bpe", 64, 1000

def stream(inputs):
    s = PairStream([inputs], [1.0], CharTokenizer.train(["ab"]), max_len=64,
                   skip_empty=False, buffer=64, seed=0)
    s.set_max_tokens(1000)
    return s

bounded.EXPANSION_FLOOR = 8 << 20  # the unit under test is each reader; the CLI test keeps 64 MiB
for D in map(Path, sys.argv[1:]):
    gz = "" if D.name == "100MB" else ".gz"
    for kind, code in READERS.items():
        print(D.name, kind, sep=" | ", end=" | ", flush=True)
        sys.stdin.seek(0)
        start = time.perf_counter()
        try:
            eval(code)
            print("no error", flush=True)
        except DataError as e:
            print(f"{time.perf_counter() - start:.2f} | {e}", flush=True)
"""


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> dict[str, Path]:
    """Directories whose files ``h``, ``h.de``, ``h.tsv``, ``h.jsonl`` (+ ``.gz``) are hostile."""
    root = tmp_path_factory.mktemp("hostile")
    one_line = gzip_bomb(root / "one-line.gz", b"a")  # 1 MiB -> 1 GiB, no newline
    many = {  # 1 GiB of 1 KB lines, each valid for its format
        "h": b"a" * 1023 + b"\n",
        "h.de": b"a" * 1023 + b"\n",
        "h.en": b"b" * 1023 + b"\n",
        "h.tsv": b"a" * 511 + b"\t" + b"b" * 511 + b"\n",
        "h.jsonl": json.dumps({"src": "a" * 500, "tgt": "b" * 500}).encode() + b"\n",
    }
    plain = long_line(root / "long-line")  # 100 MB, no newline
    dirs = {}
    for case in ("one-line", "many-lines", "100MB"):
        d = dirs[case] = root / case
        d.mkdir()
        for name, line in many.items():
            if case == "100MB":
                (d / name).symlink_to(plain)
            elif case == "one-line":
                (d / f"{name}.gz").symlink_to(one_line)
            else:
                gzip_bomb(d / f"{name}.gz", line, total=256 << 20)
    return dirs


LONG = r"line longer than 1,048,576 bytes"
EXPECT = {
    "one-line": LONG,
    "many-lines": r"expands more than 100 times its compressed size",
    "100MB": LONG,
}


def test_every_reader_refuses_hostile_input_within_limits(hostile) -> None:
    """Each reader gives one DataError naming the file, fast, under a 2 GiB address space
    (standard input, never decompressed, gets the 100 MB line each time). One child runs
    them all: importing torch costs more than all the reading."""
    root = next(iter(hostile.values())).parent
    script = f"READERS = {READERS!r}\n{CHILD}"
    child = run_limited([sys.executable, "-c", script, *(str(hostile[c]) for c in EXPECT)],
                        cwd=root, stdin_path=root / "100MB" / "h")  # fmt: skip
    assert child.returncode == 0 and not child.stderr, child.stderr[-2000:]
    assert 0 < child.peak_rss < PEAK_RSS, f"peak RSS {child.peak_rss / 2**20:.0f} MiB"
    rows = [line.split(" | ") for line in child.stdout.splitlines()]
    assert [r[:2] for r in rows] == [[c, k] for c in EXPECT for k in READERS], child.stdout
    for case, kind, *rest in rows:
        assert len(rest) == 2, f"{case}, {kind}: {rest}"
        seconds, message = float(rest[0]), rest[1]
        stdin = kind == "standard input"
        assert seconds < SECONDS / 2, f"{case}, {kind} took {seconds} s"
        assert message.startswith("<stdin>:1: " if stdin else str(hostile[case])), message
        assert re.search(LONG if stdin else EXPECT[case], message), f"{case}, {kind}: {message}"
