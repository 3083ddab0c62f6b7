"""The converted-model cache beside a checkpoint: convert once, reuse, rebuild when stale.

Layout (inside the checkpoint directory)::

    CKPT/engines/<engine>-<key>/engine.json   what the key was made of (written last)
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
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from attnkit import jsonio
from attnkit.checkpoints import safe_files
from attnkit.checkpoints.adapters import ADAPTER_FILE, weights_sha256
from attnkit.checkpoints.files import CONFIG_FILE, TOKENIZER_FILE
from attnkit.checkpoints.loading import LoadedModel
from attnkit.interop.engines_base import Converter
from attnkit.outputs import staged_directory

CACHE_DIR = "engines"
MANIFEST = "engine.json"
MODEL_DIR = "model"
FORMAT = 1


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


def _read_manifest(directory: Path) -> dict[str, Any]:
    try:
        manifest = json.loads((directory / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return manifest if isinstance(manifest, dict) else {}


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
    user a conversion is happening, and why when it replaces a stale one.
    """
    version = engine.version()
    files = fingerprint(checkpoint)
    root = checkpoint / CACHE_DIR
    target = root / f"{engine.name}-{cache_key(files, version)}"
    if (target / MANIFEST).is_file():
        return target / MODEL_DIR
    stale = sorted(p for p in root.glob(f"{engine.name}-*") if p.is_dir()) if root.is_dir() else []
    if stale:
        why = _why_stale(_read_manifest(stale[-1]), files, version)
        say(f"engine cache {stale[-1]} is stale ({why}); rebuilding it as {target.name}")
    else:
        say(f"converting {checkpoint} for --engine {engine.name} (once; cached in {target})")
    loaded = load()
    with staged_directory(target, overwrite=True, option="engine cache") as tmp:
        engine.convert(loaded, tmp / MODEL_DIR)
        manifest = {"engine": engine.name, "version": version, "files": files, "format": FORMAT}
        safe_files.write_json(tmp / MANIFEST, manifest)
    for old in stale:
        shutil.rmtree(old, ignore_errors=True)
    return target / MODEL_DIR
