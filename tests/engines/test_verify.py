"""An engine cache is verified before it is trusted (``engines_verify``), on a stand-in
engine whose conversion writes two small files (no real engine: milliseconds a case).

Every kind of damage (FIFOs, sockets, devices, links, loops, a ``model/`` linked
elsewhere, garbage of the right size with its mtime set back, missing or extra
files, an older manifest) is one ``failed verification (why); rebuilding`` line,
one conversion, and a cache the next call trusts without converting or hashing.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from cache_damage import DAMAGE, watchdog

from attnkit.checkpoints import safe_files
from attnkit.engines import cache as engines_cache
from attnkit.engines import verify as engines_verify
from attnkit.engines.cache import FORMAT, cache_key, converted_model, fingerprint
from attnkit.errors import EngineError

FILE = "model/model.bin"


class Stand:
    """A Converter: ``model/model.bin`` (64 KiB of bytes) and ``model/config.json``."""

    name = "stand"
    unrecorded: tuple[str, ...] = ("probe.json",)

    @staticmethod
    def version() -> str:
        return "stand 1.0"

    @staticmethod
    def convert(loaded: object, out: Path) -> None:
        out.mkdir(parents=True)
        (out / "model.bin").write_bytes(bytes(range(256)) * 256)
        (out / "config.json").write_text('{"layers": 2}\n')


@pytest.fixture
def checkpoint(tmp_path):
    directory = tmp_path / "ckpt"
    directory.mkdir()
    (directory / "config.json").write_text("{}")
    safe_files.save_tensors(directory / "model.safetensors", {"w": torch.zeros(4)})
    return directory


class Calls:
    """What ``converted_model`` said and how often it loaded the checkpoint."""

    def __init__(self) -> None:
        self.said: list[str] = []
        self.loads = 0

    def load(self) -> object:
        self.loads += 1
        return object()

    def __call__(self, checkpoint: Path) -> Path:
        self.said.clear()
        self.loads = 0
        with watchdog(60):
            return converted_model(checkpoint, Stand, self.load, self.said.append)


@pytest.fixture
def hashed(monkeypatch):
    """The files ``engines_verify`` hashes, in order."""
    seen: list[str] = []
    real = engines_verify.sha256

    def counting(path: Path) -> str:
        seen.append(path.name)
        return real(path)

    monkeypatch.setattr(engines_verify, "sha256", counting)
    return seen


def test_a_sound_cache_is_trusted_without_hashing(checkpoint, hashed):
    calls = Calls()
    model = calls(checkpoint)
    assert calls.loads == 1 and "converting" in calls.said[0]
    manifest = json.loads((model.parent / "engine.json").read_text())
    assert set(manifest["contents"]) == {FILE, "model/config.json"}
    assert manifest["format"] == FORMAT == 2
    hashed.clear()
    assert calls(checkpoint) == model and calls.said == [] and calls.loads == 0
    assert hashed == []  # the stamps match: nothing read


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_damage_is_one_line_then_a_rebuild_the_next_call_trusts(checkpoint, damage, hashed):
    calls = Calls()
    model = calls(checkpoint)
    cache = model.parent
    try:
        why = DAMAGE[damage](cache, FILE)
    except PermissionError:
        pytest.skip("mknod needs root (CI runs as root)")
    assert calls(checkpoint) == model
    (line,) = calls.said
    assert line.startswith(f"engine cache {cache} failed verification (") and why in line
    assert line.endswith("); rebuilding") and calls.loads == 1
    assert (model / "model.bin").read_bytes() == bytes(range(256)) * 256
    assert not cache.is_symlink() and not (cache / "model").is_symlink()
    hashed.clear()
    assert calls(checkpoint) == model and calls.said == [] and calls.loads == 0
    assert hashed == []
    assert [p.name for p in cache.parent.iterdir()] == [cache.name]  # nothing left aside


def test_what_links_pointed_at_is_left_alone(checkpoint):
    calls = Calls()
    cache = calls(checkpoint).parent
    DAMAGE["model_dir_elsewhere"](cache, FILE)
    elsewhere = (cache / "model").resolve()
    calls(checkpoint)
    assert sorted(p.name for p in elsewhere.iterdir()) == ["config.json", "model.bin"]
    DAMAGE["cache_is_a_link"](cache, FILE)
    linked = cache.resolve()
    calls(checkpoint)
    assert (linked / "engine.json").is_file() and not cache.is_symlink()


def test_a_copied_cache_is_hashed_once_and_restamped(checkpoint, tmp_path, hashed):
    calls = Calls()
    calls(checkpoint)
    copy = shutil.copytree(checkpoint, tmp_path / "copy")  # new inodes and ctimes
    hashed.clear()
    calls(copy)
    assert calls.said == [] and calls.loads == 0 and sorted(hashed) == ["config.json", "model.bin"]
    hashed.clear()
    calls(copy)
    assert hashed == []  # the new stamps were written back


def test_a_read_only_copy_is_still_used(checkpoint, tmp_path, hashed, monkeypatch):
    calls = Calls()
    calls(checkpoint)
    copy = shutil.copytree(checkpoint, tmp_path / "copy")

    def read_only(*args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("attnkit.output_paths.atomic.write_text", read_only)
    for _ in range(2):
        hashed.clear()
        calls(copy)
        assert calls.said == [] and calls.loads == 0 and len(hashed) == 2  # hashed each time


def test_a_cache_that_cannot_be_removed_is_refused_in_one_line(checkpoint, monkeypatch):
    calls = Calls()
    cache = calls(checkpoint).parent
    DAMAGE["fifo_model"](cache, FILE)

    def refuse(path: Path) -> None:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(engines_cache, "_discard", refuse)
    with pytest.raises(EngineError) as e:
        calls(checkpoint)
    message = str(e.value)
    assert "\n" not in message and str(cache) in message
    assert f"failed verification ({FILE} is a FIFO" in message and "permission denied" in message
    assert calls.loads == 0


def test_a_crash_while_rebuilding_leaves_nothing_a_later_run_trusts(checkpoint, monkeypatch):
    calls = Calls()
    cache = calls(checkpoint).parent
    DAMAGE["garbage_same_size"](cache, FILE)

    def crash(loaded: object, out: Path) -> None:
        out.mkdir(parents=True)
        (out / "model.bin").write_bytes(b"half")
        raise KeyboardInterrupt  # as a Ctrl-C mid-conversion

    monkeypatch.setattr(Stand, "convert", staticmethod(crash))
    with pytest.raises(KeyboardInterrupt):
        calls(checkpoint)
    assert list(cache.parent.iterdir()) == []  # the bad cache gone, no half-built one
    monkeypatch.undo()
    calls(checkpoint)
    assert len(calls.said) == 1 and "converting" in calls.said[0] and calls.loads == 1


def test_an_older_format_cache_is_stale_and_removed(checkpoint):
    files = fingerprint(checkpoint)
    payload = json.dumps({"files": files, "version": "stand 1.0", "format": 1}, sort_keys=True)
    import hashlib

    old = checkpoint / "engines" / f"stand-{hashlib.sha256(payload.encode()).hexdigest()[:16]}"
    (old / "model").mkdir(parents=True)
    (old / "engine.json").write_text(json.dumps({"engine": "stand", "version": "stand 1.0",
                                                 "files": files, "format": 1}))  # fmt: skip
    assert old.name != f"stand-{cache_key(files, 'stand 1.0')}"
    calls = Calls()
    model = calls(checkpoint)
    assert calls.said == [f"engine cache {old} is stale (cache format changed); "
                          f"rebuilding it as {model.parent.name}"]  # fmt: skip
    assert not old.exists() and model.parent.is_dir()


def test_a_stale_fifo_manifest_does_not_block_and_the_users_names_are_kept(checkpoint):
    calls = Calls()
    cache = calls(checkpoint).parent
    stale = cache.with_name("stand-" + "0" * 16)
    shutil.copytree(cache, stale)
    (stale / "engine.json").unlink()
    os.mkfifo(stale / "engine.json")
    mine = cache.with_name("stand-backup")
    mine.mkdir()
    shutil.rmtree(cache)
    calls(checkpoint)
    assert len(calls.said) == 1 and f"engine cache {stale} is stale" in calls.said[0]
    assert not stale.exists() and mine.is_dir()


def test_the_probe_outcome_may_be_written_after_the_build(checkpoint, hashed):
    calls = Calls()
    model = calls(checkpoint)
    (model / "probe.json").write_text('{"cpu | model.bin": "ok"}\n')
    (model / ".probe.tmp-0123abcd.json").write_text("{}")  # an atomic write in progress
    assert calls(checkpoint) == model and calls.said == []
    (model / "probe.json").unlink()
    os.mkfifo(model / "probe.json")
    calls(checkpoint)
    assert "model/probe.json is a FIFO" in calls.said[0]
    (model / "probe.json").write_bytes(b" " * (engines_verify.MAX_UNRECORDED_BYTES + 1))
    calls(checkpoint)
    assert "model/probe.json is 1048577 bytes" in calls.said[0]


def test_a_cache_nested_too_deep_or_too_wide_fails(checkpoint, monkeypatch):
    calls = Calls()
    cache = calls(checkpoint).parent
    deep = cache / "model" / "/".join("d" * (engines_verify.MAX_DEPTH + 1))
    deep.mkdir(parents=True)
    calls(checkpoint)
    assert "nested over" in calls.said[0]
    monkeypatch.setattr(engines_verify, "MAX_ENTRIES", 3)
    calls(checkpoint)
    assert "more than 3 entries" in calls.said[0]
