"""A directory of prepared data, keyed by a hash of what it was made from.

``ensure(root, stage, fingerprint, build)`` returns ``root/{stage}-{key}``,
where ``key`` hashes ``fingerprint`` (the input files' paths, sizes and
modification times, and every setting the result depends on). If that
directory holds a complete result it is reused; otherwise ``build`` fills a
fresh one, and the caller is told why (``train.de changed (size 1,024 ->
1,031 bytes)``, ``tokenizer.vocab_size 8000 -> 4000``), found by comparing
with the newest result of the same stage made from any of the same files.

Writing is atomic: ``build`` writes into ``{stage}-{key}.tmp-{pid}``, every
file is fsynced, ``manifest.json`` (the fingerprint and every file's size)
is written last, and the directory is renamed into place. A directory is
trusted only when its manifest is there, names the same fingerprint and
every file has its recorded size; a preparation killed at any moment leaves
at most a ``.tmp-`` directory, which the next preparation removes. An
exclusive lock per key (``flock``) lets one process build while others (the
ranks of a torchrun job, a second ``attnkit prepare``) wait, then reuse.

A file counts as unchanged while its size and modification time are (as
``make`` and ``datasets`` decide), so looking up a result never reads the data.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypedDict

from attnkit import jsonio
from attnkit.errors import DataError

FORMAT = 1  # bump when the layout of a prepared directory changes
MANIFEST = "manifest.json"
CACHE_ENV = "ATTNKIT_CACHE_DIR"
Log = Callable[[str], None]


def default_root() -> Path:
    """``$ATTNKIT_CACHE_DIR``, else ``$XDG_CACHE_HOME/attnkit``, else ``~/.cache/attnkit``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "attnkit"


class FileIdentity(TypedDict):
    """A fingerprint's entry for one input file."""

    path: str  # absolute
    size: int
    mtime_ns: int


def file_identity(path: Path) -> FileIdentity:
    """What decides whether ``path`` changed: its absolute path, size and mtime."""
    try:
        st = path.stat()
    except OSError as e:
        raise DataError(f"{path}: cannot read the file ({e.strerror or e})") from None
    return {"path": str(path.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def digest(value: object) -> str:
    """A short stable hash of a JSON-able value."""
    text = jsonio.dumps(value, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_manifest(directory: Path) -> dict[str, object] | None:
    """The manifest of a complete, undamaged prepared directory, else ``None``."""
    try:
        manifest = json.loads((directory / MANIFEST).read_text(encoding="utf-8"))
        files = manifest["files"]
        if manifest.get("format") != FORMAT or not isinstance(files, dict):
            return None
        for name, size in files.items():
            if (directory / name).stat().st_size != size:
                return None
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return manifest


@contextlib.contextmanager
def _locked(path: Path, blocking: bool = True) -> Iterator[bool]:
    with open(path, "a+b") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


# What ``ensure`` names a preparation under way: ``{stage}-{16 hex}.tmp-{pid}``. Nothing
# else in the cache root is removed (``data.cache_dir`` may name a directory holding the
# user's own files, a ``backup.tmp-1`` among them).
_TMP_NAME = re.compile(r"[a-z0-9_]+-[0-9a-f]{16}\.tmp-[0-9]+")


def _remove_abandoned(root: Path, own_lock: str) -> None:
    """Remove ``.tmp-`` directories whose preparation is no longer running."""
    for tmp in root.glob("*.tmp-*"):
        if not _TMP_NAME.fullmatch(tmp.name) or tmp.is_symlink() or not tmp.is_dir():
            continue
        lock = tmp.name.split(".tmp-")[0] + ".lock"
        if lock == own_lock:  # ours: we hold its lock, so nobody else writes there
            shutil.rmtree(tmp, ignore_errors=True)
            continue
        with _locked(root / lock, blocking=False) as free:
            if free:
                shutil.rmtree(tmp, ignore_errors=True)


def _trusted(directory: Path, fingerprint: Mapping[str, object]) -> dict[str, object] | None:
    manifest = read_manifest(directory)
    return manifest if manifest is not None and manifest["fingerprint"] == fingerprint else None


def ensure(
    root: Path,
    stage: str,
    fingerprint: Mapping[str, object],
    build: Callable[[Path], Mapping[str, object]],
    *,
    log: Log | None = None,
) -> tuple[Path, dict[str, Any]]:
    """``(directory, manifest)`` of the prepared result for ``fingerprint``, built if needed.

    ``build(tmp_dir)`` writes its files into ``tmp_dir`` (syncing them) and
    returns what the manifest records beside them (counts, dtypes, timings).
    """
    say = log or (lambda _: None)
    fingerprint = {"format": FORMAT, "stage": stage, **fingerprint}
    final = root / f"{stage}-{digest(fingerprint)}"
    manifest = _trusted(final, fingerprint)
    if manifest is not None:
        say(f"reusing {final} (prepared {manifest['created']})")
        return final, manifest
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DataError(f"{root}: cannot create the data cache ({e.strerror or e}); "
                        "set data.cache_dir or $ATTNKIT_CACHE_DIR") from None  # fmt: skip
    lock = f"{final.name}.lock"
    with _locked(root / lock):
        manifest = _trusted(final, fingerprint)  # another process may have built it meanwhile
        if manifest is not None:
            say(f"reusing {final} (prepared {manifest['created']})")
            return final, manifest
        say(f"preparing {final} ({explain(root, stage, fingerprint)})")
        _remove_abandoned(root, lock)
        shutil.rmtree(final, ignore_errors=True)  # incomplete or damaged: never trusted
        tmp = root / f"{final.name}.tmp-{os.getpid()}"
        tmp.mkdir()
        try:
            extra = build(tmp)
            files = {p.name: p.stat().st_size for p in sorted(tmp.iterdir())}
            manifest = {"format": FORMAT, "fingerprint": fingerprint, "files": files,
                        "created": time.strftime("%Y-%m-%d %H:%M:%S"), **extra}  # fmt: skip
            with open(tmp / MANIFEST, "w", encoding="utf-8") as f:
                jsonio.dump(manifest, f, indent=1, ensure_ascii=False)
                f.flush()
                os.fsync(f.fileno())
            _fsync_dir(tmp)
            os.rename(tmp, final)
            _fsync_dir(root)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return final, manifest


# -- saying why ------------------------------------------------------------------------


def explain(root: Path, stage: str, fingerprint: Mapping[str, Any]) -> str:
    """Why ``fingerprint`` has no result: how it differs from the newest result of
    ``stage`` made from any of the same files, or that there is none."""
    paths = {f["path"] for f in fingerprint.get("inputs", [])}
    best: tuple[float, dict[str, object]] | None = None
    for manifest_path in root.glob(f"{stage}-*/{MANIFEST}"):
        try:
            old = json.loads(manifest_path.read_text(encoding="utf-8"))["fingerprint"]
            when = manifest_path.stat().st_mtime
            shared = paths & {f["path"] for f in old.get("inputs", [])}
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if shared and (best is None or when > best[0]):
            best = (when, old)
    if best is None:
        return "no prepared data for these files yet"
    reasons = differences(best[1], fingerprint)
    return "; ".join(reasons[:4]) if reasons else "the earlier result is incomplete or damaged"


def differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """What changed from fingerprint ``old`` to ``new``, in words."""
    reasons: list[str] = []
    before = {f["path"]: f for f in old.get("inputs", [])}
    after = {f["path"]: f for f in new.get("inputs", [])}
    for path, f in after.items():
        was = before.get(path)
        if was is None:
            reasons.append(f"{path} is new")
        elif was["size"] != f["size"]:
            reasons.append(f"{path} changed (size {was['size']:,} -> {f['size']:,} bytes)")
        elif was["mtime_ns"] != f["mtime_ns"]:
            reasons.append(f"{path} changed (modified {_when(was)} -> {_when(f)})")
    reasons += [f"{path} is no longer an input" for path in before if path not in after]
    flat_old, flat_new = _flatten(old), _flatten(new)
    for key in sorted(flat_old.keys() | flat_new.keys()):
        was, now = flat_old.get(key), flat_new.get(key)
        if key.startswith("inputs") or was == now:
            continue
        if key == "tokenizer":  # a hash of the tokenizer's JSON (the ids' vocabulary)
            reasons.append(f"another tokenizer, hash {was} -> {now}")
            continue
        reasons.append(f"{key} {was} -> {now}")
    return reasons


def _when(f: dict[str, Any]) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(f["mtime_ns"] / 1e9))


def _flatten(value: object, prefix: str = "") -> dict[str, object]:
    if isinstance(value, dict):
        out: dict[str, object] = {}
        for k, v in value.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: value}
