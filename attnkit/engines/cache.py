"""The converted-model cache beside a checkpoint: convert once, reuse, rebuild when stale.

Layout (inside the checkpoint directory)::

    CKPT/engines/<engine>-<key>/engine.json   what the key was made of, and the size,
                                              digest and stamp of every other file
                                              (written last)
    CKPT/engines/<engine>-<key>/model/        the export (attnkit export --to ...)

``key`` is the first 16 hex digits of a SHA-256 over the checkpoint's files
that the conversion reads (``model.safetensors``, ``config.json``,
``tokenizer.json``, and ``adapter.json`` of a LoRA checkpoint, which records
its base's weights hash), the engine packages' versions and this cache's
format. A directory of the same engine under another key is stale (the
weights changed, or the engine was upgraded): it is rebuilt under the new
key, one line on stderr says why, and the stale one is removed afterwards.

Writes go through the output-path policy's staged directory: the whole
``<engine>-<key>`` directory is built hidden beside its final name and swapped
in, ``engine.json`` included, so a killed conversion leaves no directory that
looks finished. Two processes converting at once each build their own copy;
the later swap wins, and both copies are the same conversion.

Before a cache is used, ``attnkit.engines.verify.check`` compares what
it holds with what ``engine.json`` records (regular files only, no links, the
recorded sizes and digests). A cache that fails is rebuilt the same way, with
one line on stderr saying why; one that cannot be removed is refused in one
line naming it. Only directories named ``<engine>-<16 hex digits>`` are ever
removed from ``engines/``; a link there is unlinked, never followed.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from attnkit import jsonio
from attnkit.checkpoints import safe_files
from attnkit.checkpoints.adapters import ADAPTER_FILE, weights_sha256
from attnkit.checkpoints.files import CONFIG_FILE, TOKENIZER_FILE
from attnkit.checkpoints.loading import LoadedModel
from attnkit.engines.base import Converter
from attnkit.engines.verify import MANIFEST, check, read_manifest, record
from attnkit.errors import EngineError
from attnkit.output_paths import describe_os_error, staged_directory

CACHE_DIR = "engines"
MODEL_DIR = "model"
FORMAT = 2  # 2: engine.json records the contents (size, digest, stamp of each file)


def _file_sha256(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def fingerprint(checkpoint: Path) -> dict[str, str | None]:
    """SHA-256 of each checkpoint file a conversion reads (None: the file is absent)."""
    return {
        "weights": weights_sha256(checkpoint),
        "config": _file_sha256(checkpoint / CONFIG_FILE),
        "tokenizer": _file_sha256(checkpoint / TOKENIZER_FILE),
        "adapter": _file_sha256(checkpoint / ADAPTER_FILE),
    }


def cache_key(files: dict[str, str | None], version: str) -> str:
    payload = jsonio.dumps({"files": files, "version": version, "format": FORMAT}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def _caches(root: Path, engine: str) -> list[Path]:
    """The cache entries of ``engine`` in ``root`` (links and odd files included, never
    followed); names of another shape (``ctranslate2-backup``) are the user's."""
    shape = re.compile(rf"{re.escape(engine)}-[0-9a-f]{{16}}")
    try:
        return sorted(p for p in root.iterdir() if shape.fullmatch(p.name))
    except OSError:  # no engines/ yet (or not a directory: the build says so)
        return []


def _discard(path: Path) -> None:
    """Remove the cache entry ``path``: a link or file is unlinked (its target untouched);
    a directory is renamed aside first, so no half-removed cache is ever seen."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(mode):
        path.unlink()
        return
    aside = path.with_name(f".{path.name}.old-{uuid.uuid4().hex[:8]}")
    os.rename(path, aside)
    shutil.rmtree(aside, ignore_errors=True)


def _why_stale(old: dict[str, Any], files: dict[str, str | None], version: str) -> str:
    """Which inputs of the key differ from a stale directory's manifest, in words."""
    names = {"weights": "the weights", "config": CONFIG_FILE, "tokenizer": TOKENIZER_FILE,
             "adapter": ADAPTER_FILE}  # fmt: skip
    before = old.get("files", {})
    reasons = [f"{names[k]} changed" for k in names if before.get(k) != files.get(k)]
    if old.get("version") != version:
        reasons.append(f"{old.get('version', 'an unknown version')} -> {version}")
    return ", ".join(reasons) or "cache format changed"


def converted_model(
    checkpoint: Path,
    engine: Converter,
    load: Callable[[], LoadedModel],
    say: Callable[[str], None],
) -> Path:
    """The engine's model directory for ``checkpoint``, converted first if needed.

    ``load`` is called only on a cache miss (loading the model is the slow
    part of a cache hit otherwise); ``say`` gets the one line that tells the
    user a conversion is happening, and why: a stale cache, or one that failed
    verification (``verify.check``).
    """
    version = engine.version()
    files = fingerprint(checkpoint)
    root = checkpoint / CACHE_DIR
    target = root / f"{engine.name}-{cache_key(files, version)}"
    keyed = {"engine": engine.name, "version": version, "files": files, "format": FORMAT}
    unrecorded = tuple(f"{MODEL_DIR}/{name}" for name in engine.unrecorded)
    stale = [p for p in _caches(root, engine.name) if p != target]
    if os.path.lexists(target):
        checked = check(target, keyed, unrecorded)
        if checked.problem is None:
            return target / MODEL_DIR
        failed = f"engine cache {target} failed verification ({checked.problem})"
        try:
            _discard(target)
        except OSError as e:
            raise EngineError(
                f"{failed} and cannot be removed ({describe_os_error(e)}); remove it or make "
                f"{root} writable"
            ) from None
        say(f"{failed}; rebuilding")
    elif stale:
        old, _ = read_manifest(stale[-1])
        why = _why_stale(old or {}, files, version)
        say(f"engine cache {stale[-1]} is stale ({why}); rebuilding it as {target.name}")
    else:
        say(f"converting {checkpoint} for --engine {engine.name} (once; cached in {target})")
    loaded = load()
    with staged_directory(target, overwrite=True, option="engine cache") as tmp:
        engine.convert(loaded, tmp / MODEL_DIR)
        # recorded before engine.json exists: the manifest lists every other file
        safe_files.write_json(tmp / MANIFEST, {**keyed, "contents": record(tmp)})
    for old_cache in stale:
        try:
            _discard(old_cache)
        except OSError:
            pass  # a stale cache left behind is never used (its key differs)
    return target / MODEL_DIR
