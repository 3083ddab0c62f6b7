"""An engine cache's contents: recorded when it is built, checked before it is loaded.

``engine.json`` (the manifest, written last) records every file the build
wrote below the cache directory: its size, its SHA-256 and a *stamp*
(inode, mtime and ctime in nanoseconds, taken once the file was written).
Before a cache is trusted, ``check`` walks it without following anything:

* the cache directory and everything in it are directories or regular files:
  a symbolic link (a loop, a ``model/`` that points elsewhere, a link to a
  file inside), a FIFO, a socket or a device fails, and is never opened, so
  nothing can block (``engine.json`` is ``lstat``-ed before it is opened,
  and opened with ``O_NONBLOCK | O_NOFOLLOW``);
* the manifest is at most ``MAX_MANIFEST_BYTES``, JSON, of this format, and
  names the key's inputs (an older cache, which records no contents, fails);
* the files are exactly those recorded (plus an engine's ``unrecorded``
  ones, such as llama.cpp's probe outcome: regular and small), with the
  recorded sizes;
* a file whose stamp differs from the recorded one is hashed and must match
  the recorded digest; the new stamp is then written back (best effort), so
  a copied cache is hashed once, not on every load.

Why stamps instead of hashing on every load: SHA-256 runs at ~1.6 GB/s on a
core here (``hashlib.file_digest`` on 256 MiB of random bytes), so a 7 GB
GGUF would cost ~4.5 s per ``generate`` (more from a cold disk) where
llama.cpp itself maps the file in milliseconds. Writing a file changes its
ctime, which no user-level call can set back (``os.utime`` sets mtime and
atime only), so garbage written over a file of the same size, even with its
mtime restored, changes the stamp and is hashed. Not caught: a same-size
rewrite within the filesystem's timestamp granularity (a few milliseconds)
of the build, or a deliberate forgery that also rewrites ``engine.json``;
the cache is a convenience beside the user's checkpoint, not a signature.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict, TypeGuard

from attnkit import jsonio
from attnkit.errors import EngineError
from attnkit.output_paths import describe_os_error
from attnkit.output_paths.policy import kind_of

MANIFEST = "engine.json"
MAX_MANIFEST_BYTES = 1 << 20  # a manifest is a few KB; refuse a bigger one unread
MAX_UNRECORDED_BYTES = 1 << 20  # a probe outcome is a few lines
MAX_ENTRIES = 10_000  # files and directories in one cache (an export writes a handful)
MAX_DEPTH = 8  # directory levels below the cache directory

_O_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


class Entry(TypedDict):
    """What the manifest records of one file."""

    size: int
    sha256: str
    stamp: list[int]  # [ino, mtime_ns, ctime_ns]


@dataclass
class Checked:
    """``check``'s answer: ``problem`` in words (None: the cache may be loaded)."""

    problem: str | None
    manifest: dict[str, object] | None = None


def _stamp(st: os.stat_result) -> list[int]:
    return [st.st_ino, st.st_mtime_ns, st.st_ctime_ns]


def _open_regular(path: Path) -> int:
    """A descriptor of ``path``, a regular file (never a link, FIFO or device: not blocking)."""
    fd = os.open(path, _O_FLAGS)
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # replaced since it was lstat-ed
        os.close(fd)
        raise EngineError(f"{path}: not a regular file")
    return fd


def sha256(path: Path) -> str:
    with os.fdopen(_open_regular(path), "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _walk(directory: Path) -> tuple[dict[str, os.stat_result], str | None]:
    """Every regular file below ``directory`` (relative POSIX path -> ``lstat``), or the
    first entry that is anything else but a directory, in words. Follows nothing."""
    files: dict[str, os.stat_result] = {}
    stack: list[tuple[Path, str, int]] = [(directory, "", 0)]
    seen = 0
    while stack:
        path, prefix, depth = stack.pop()
        try:
            with os.scandir(path) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as e:
            return files, f"{prefix or './'}: cannot list ({describe_os_error(e)})"
        for entry in entries:
            seen += 1
            if seen > MAX_ENTRIES:
                return files, f"more than {MAX_ENTRIES} entries"
            name = prefix + entry.name
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError as e:
                return files, f"{name}: {describe_os_error(e)}"
            if stat.S_ISDIR(st.st_mode):
                if depth + 1 > MAX_DEPTH:
                    return files, f"{name}: directories nested over {MAX_DEPTH} deep"
                stack.append((Path(entry.path), name + "/", depth + 1))
            elif stat.S_ISREG(st.st_mode):
                files[name] = st
            else:
                return files, f"{name} is {kind_of(st.st_mode)}"
    return files, None


def record(directory: Path) -> dict[str, Entry]:
    """Size, SHA-256 and stamp of every file a build wrote below ``directory``."""
    files, problem = _walk(directory)
    if problem is not None:
        raise EngineError(f"engine cache {directory}: the conversion left {problem}")
    return {
        name: {"size": st.st_size, "sha256": sha256(directory / name), "stamp": _stamp(st)}
        for name, st in files.items()
    }


def read_manifest(directory: Path) -> tuple[dict[str, object] | None, str | None]:
    """``directory``'s manifest, or why it cannot be read (stat before open: never blocks)."""
    path = directory / MANIFEST
    try:
        st = path.lstat()
    except FileNotFoundError:
        return None, f"{MANIFEST} is missing"
    except OSError as e:
        return None, f"{MANIFEST}: {describe_os_error(e)}"
    if not stat.S_ISREG(st.st_mode):
        return None, f"{MANIFEST} is {kind_of(st.st_mode)}"
    if st.st_size > MAX_MANIFEST_BYTES:
        return None, f"{MANIFEST} is {st.st_size} bytes, over {MAX_MANIFEST_BYTES}"
    try:
        with os.fdopen(_open_regular(path), "rb") as f:
            manifest = json.loads(f.read(MAX_MANIFEST_BYTES + 1))
    except (OSError, EngineError) as e:
        return None, f"{MANIFEST}: cannot read ({e})"
    except (ValueError, RecursionError):
        return None, f"{MANIFEST} is not valid JSON"
    if not isinstance(manifest, dict):
        return None, f"{MANIFEST} is not a JSON object"
    return manifest, None


def _temporary_of(name: str, unrecorded: tuple[str, ...]) -> bool:
    """An atomic write's temporary of an unrecorded file (``.probe.tmp-1a2b3c4d.json``)."""
    head, _, base = name.rpartition("/")
    for other in unrecorded:
        other_head, _, other_base = other.rpartition("/")
        stem, dot, suffix = other_base.partition(".")
        pattern = rf"\.{re.escape(stem)}\.tmp-[0-9a-f]{{8}}{re.escape(dot + suffix)}"
        if head == other_head and re.fullmatch(pattern, base):
            return True
    return False


def _contents_problem(
    directory: Path, recorded: dict[str, Entry], unrecorded: tuple[str, ...]
) -> tuple[str | None, bool]:
    """Why the files below ``directory`` are not those ``recorded`` (None: they are), and
    whether a file's stamp changed though its digest did not (the manifest needs the new one).
    """
    files, problem = _walk(directory)
    if problem is not None:
        return problem, False
    files.pop(MANIFEST, None)
    for name in sorted(recorded):
        if name not in files:
            return f"{name} is missing", False
    for name, st in sorted(files.items()):
        if name in recorded:
            continue
        if name not in unrecorded and not _temporary_of(name, unrecorded):
            return f"{name} is not part of the build", False
        if st.st_size > MAX_UNRECORDED_BYTES:
            return f"{name} is {st.st_size} bytes, over {MAX_UNRECORDED_BYTES}", False
    for name, entry in sorted(recorded.items()):
        if files[name].st_size != entry["size"]:
            return f"{name} is {files[name].st_size} bytes, {entry['size']} recorded", False
    restamped = False
    for name, entry in sorted(recorded.items()):
        if _stamp(files[name]) == entry["stamp"]:
            continue
        try:
            digest = sha256(directory / name)
        except (OSError, EngineError) as e:
            return f"{name}: cannot read ({e})", False
        if digest != entry["sha256"]:
            return f"{name} digest differs", False
        entry["stamp"] = _stamp(files[name])
        restamped = True
    return None, restamped


def _valid_record(recorded: object) -> TypeGuard[dict[str, Entry]]:
    def valid(entry: object) -> bool:
        return (
            isinstance(entry, dict)
            and isinstance(entry.get("size"), int)
            and isinstance(entry.get("sha256"), str)
            and isinstance(entry.get("stamp"), list)
        )

    return isinstance(recorded, dict) and all(valid(e) for e in recorded.values())


def check(
    directory: Path, keyed: Mapping[str, object], unrecorded: tuple[str, ...] = ()
) -> Checked:
    """Whether the cache ``directory`` holds what its manifest records (module doc).

    ``keyed``: what the manifest must say besides its contents (the cache key's
    inputs: engine, version, checkpoint files, format). ``unrecorded``: files
    (paths relative to ``directory``) an engine writes after the build.
    """
    try:
        st = directory.lstat()
    except OSError as e:
        return Checked(describe_os_error(e))
    if not stat.S_ISDIR(st.st_mode):
        return Checked(f"it is {kind_of(st.st_mode)}")
    manifest, problem = read_manifest(directory)
    if manifest is None:
        return Checked(problem)
    if any(manifest.get(k) != v for k, v in keyed.items()):
        return Checked(f"{MANIFEST} does not describe this cache (an older or edited one)")
    recorded = manifest.get("contents")
    if recorded is None or not _valid_record(recorded):
        return Checked(f"{MANIFEST} records no contents (an older cache)")
    problem, restamped = _contents_problem(directory, recorded, unrecorded)
    if problem is None and restamped:
        _write_stamps(directory, manifest)
    return Checked(problem, manifest)


def _write_stamps(directory: Path, manifest: Mapping[str, object]) -> None:
    """Keep the stamps of files hashed again (a copied cache): the next load need not hash.
    Best effort: a read-only checkpoint is still usable, only hashed on each load."""
    from attnkit.errors import AttnkitError
    from attnkit.output_paths.atomic import write_text

    try:
        write_text(directory / MANIFEST, jsonio.dumps(manifest, indent=2) + "\n")
    except (OSError, AttnkitError):
        pass
