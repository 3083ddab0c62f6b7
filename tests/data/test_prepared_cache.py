"""The prepared-data cache: reuse, invalidation that says why, atomic under SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from attnkit.data import cache
from attnkit.data.cache import ensure, file_identity

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="flock and SIGKILL are POSIX")


def build_into(calls: list[str], text: str = "data"):
    def build(tmp: Path) -> dict:
        (tmp / "payload.txt").write_text(text)
        calls.append(tmp.name)
        return {"count": 1}

    return build


def fingerprint(path: Path, **settings) -> dict:
    return {"inputs": [file_identity(path)], "settings": settings}


def test_reuse_then_rebuild_when_an_input_or_a_setting_changes(tmp_path: Path) -> None:
    root, data = tmp_path / "cache", tmp_path / "train.de"
    data.write_text("a\nb\n")
    calls: list[str] = []
    said: list[str] = []
    first, manifest = ensure(
        root, "pairs", fingerprint(data, k=1), build_into(calls), log=said.append
    )
    assert (first / "payload.txt").read_text() == "data" and manifest["count"] == 1
    assert "no prepared data for these files yet" in said[-1] and len(calls) == 1

    again, _ = ensure(root, "pairs", fingerprint(data, k=1), build_into(calls), log=said.append)
    assert again == first and len(calls) == 1 and said[-1].startswith(f"reusing {first}")

    data.write_text("a\nb\nc\n")  # another size
    changed, _ = ensure(root, "pairs", fingerprint(data, k=1), build_into(calls), log=said.append)
    assert changed != first and len(calls) == 2
    assert f"{data.resolve()} changed (size 4 -> 6 bytes)" in said[-1]

    os.utime(data, ns=(1, 1))  # same size, another modification time
    ensure(root, "pairs", fingerprint(data, k=1), build_into(calls), log=said.append)
    assert f"{data.resolve()} changed (modified" in said[-1] and len(calls) == 3

    ensure(root, "pairs", fingerprint(data, k=2), build_into(calls), log=said.append)
    assert "settings.k 1 -> 2" in said[-1] and len(calls) == 4
    # Each result keeps its own directory: going back to k=1 reuses it.
    ensure(root, "pairs", fingerprint(data, k=1), build_into(calls), log=said.append)
    assert len(calls) == 4 and said[-1].startswith("reusing")


def test_a_damaged_result_is_never_trusted(tmp_path: Path) -> None:
    root, data = tmp_path / "cache", tmp_path / "train.de"
    data.write_text("a\n")
    calls: list[str] = []
    said: list[str] = []
    first, _ = ensure(root, "pairs", fingerprint(data), build_into(calls))
    (first / "payload.txt").write_text("dat")  # one byte short, as after a crash
    ensure(root, "pairs", fingerprint(data), build_into(calls), log=said.append)
    assert len(calls) == 2 and "incomplete or damaged" in said[-1]
    assert (first / "payload.txt").read_text() == "data"
    (first / cache.MANIFEST).unlink()  # no manifest: not a result
    ensure(root, "pairs", fingerprint(data), build_into(calls))
    assert len(calls) == 3


def test_a_failed_build_leaves_nothing_behind(tmp_path: Path) -> None:
    root, data = tmp_path / "cache", tmp_path / "x"
    data.write_text("a\n")

    def broken(tmp: Path) -> dict:
        (tmp / "half.bin").write_bytes(b"12")
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        ensure(root, "pairs", fingerprint(data), broken)
    assert [p.name for p in root.iterdir() if not p.name.endswith(".lock")] == []


KILLED_PREPARE = """
import os, signal, sys
from attnkit.data import formats, token_store
from attnkit.cli.main import main

formats.CHUNK_LINES = 50  # many small chunks, so the kill lands mid-way
real_append = token_store.TokenArrayWriter.append
calls = []

def append(self, seqs):
    real_append(self, seqs)
    calls.append(1)
    if len(calls) == 5:  # two chunks and a half encoded, the rest not
        os.kill(os.getpid(), signal.SIGKILL)

token_store.TokenArrayWriter.append = append
sys.exit(main(sys.argv[1:]))
"""


def test_a_killed_preparation_is_rebuilt_and_never_trusted(tmp_path: Path) -> None:
    from attnkit.data.formats import pair_inputs, read_pairs
    from attnkit.data.pair_batches import encode_pairs
    from attnkit.data.prepared import prepare_pairs
    from attnkit.data.tokenizer_kinds import load_tokenizer

    data = tmp_path / "data"
    data.mkdir()
    words = ["ein", "Hund", "zwei", "Katzen", "laufen", "schnell", "im", "Park"]
    src = [" ".join(words[(i + j) % 8] for j in range(1 + i % 6)) for i in range(400)]
    (data / "train.de").write_text("".join(s + "\n" for s in src))
    (data / "train.en").write_text("".join(s.upper() + "\n" for s in src))
    config = tmp_path / "run.yaml"
    config.write_text(
        textwrap.dedent(f"""
        data: {{dir: {data}, src_lang: de, tgt_lang: en, valid: null}}
        tokenizer: {{kind: bpe, vocab_size: 80}}
    """)
    )
    root = tmp_path / "cache"
    command = ["prepare", "--config", str(config), "--set", f"data.cache_dir={root}"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    killed = subprocess.run([sys.executable, "-c", KILLED_PREPARE, *command], env=env,
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    half = list(root.glob("pairs-*.tmp-*"))
    assert len(half) == 1 and (half[0] / "src.ids").exists()
    assert not [p for p in root.glob("pairs-*") if p.is_dir() and ".tmp-" not in p.name]

    again = subprocess.run([sys.executable, "-m", "attnkit", *command], env=env,
                           capture_output=True, text=True, timeout=120)  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert "reusing" in again.stdout.splitlines()[0]  # the tokenizer stage had finished
    assert "preparing" in again.stdout and "pairs-" in again.stdout
    assert not list(root.glob("*.tmp-*"))  # the half result was removed

    (result,) = [p for p in root.glob("pairs-*") if p.is_dir()]
    tokenizer = load_tokenizer(result / "tokenizer.json")
    inputs = pair_inputs(data, "train", "de", "en")
    prepared = prepare_pairs(inputs, tokenizer, skip_empty=False, root=root)
    assert prepared.directory == result
    want = encode_pairs(read_pairs(inputs, skip_empty=False).pairs, tokenizer)
    for side in ("src", "tgt"):
        got, ref = getattr(prepared.pairs, side), getattr(want, side)
        assert got.ids.tolist() == ref.ids.tolist() and got.offsets.tolist() == ref.offsets.tolist()


def test_a_different_tokenizer_is_named_as_such() -> None:
    old = {"inputs": [], "tokenizer": "ab12"}
    assert cache.differences(old, {"inputs": [], "tokenizer": "cd34"}) == [
        "another tokenizer, hash ab12 -> cd34"
    ]
    assert cache.differences({"inputs": [], "read": {"skip_empty": False}},
                             {"inputs": [], "read": {"skip_empty": True}}) == [
        "read.skip_empty False -> True"
    ]  # fmt: skip


def test_only_its_own_abandoned_temporaries_are_removed(tmp_path: Path) -> None:
    """``data.cache_dir`` may name a directory holding the user's files: a ``.tmp-`` name
    that ``ensure`` did not make (or a link, or a file) is never removed."""
    root = tmp_path / "cache"
    mine = [root / "backup.tmp-2024", root / "notes.tmp-1", root / "pairs-1234.tmp-5"]
    for directory in mine:
        directory.mkdir(parents=True)
        (directory / "keep.txt").write_text("x")
    (root / "file-0123456789abcdef.tmp-7").write_text("a file, not a preparation")
    abandoned = root / "pairs-0123456789abcdef.tmp-999999"
    abandoned.mkdir()
    data = tmp_path / "train.de"
    data.write_text("a\nb\n")
    ensure(root, "pairs", fingerprint(data), build_into([]))
    assert not abandoned.exists()
    assert all((directory / "keep.txt").is_file() for directory in mine)
    assert (root / "file-0123456789abcdef.tmp-7").is_file()
