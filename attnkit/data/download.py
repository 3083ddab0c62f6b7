"""Fetch one file over HTTP(S): resumable, size- and SHA-256-checked, with a progress bar.

Bytes go to ``NAME.part`` beside the destination. A dropped connection is
retried (``ATTEMPTS`` times, resuming with an HTTP ``Range`` request from the
bytes already there); if it still fails, the ``.part`` stays and the next run
resumes from it. A server that ignores the range (``200``) starts the file
over. The finished file is checked against the pinned size and digest before
it is renamed to ``NAME``: a mismatch deletes it, so nothing later trusts it.
Errors are one-line ``DataError``s naming the URL.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import re
import time
import urllib.error
import urllib.request
from pathlib import Path

from attnkit.errors import DataError
from attnkit.progress import Progress
from attnkit.progress import progress as progress_bar

ATTEMPTS = 3  # tries per file within one run (each resumes where the last stopped)
BLOCK = 1 << 20
TIMEOUT = 60.0  # seconds without a byte before a try counts as dropped
_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(BLOCK):
            h.update(block)
    return h.hexdigest()


class _Dropped(Exception):
    """The connection ended early; the ``.part`` keeps what arrived."""


def _agent() -> str:
    from attnkit import __version__

    return f"attnkit/{__version__} (attnkit data get)"


def _size_error(url: str, got: int, size: int) -> DataError:
    return DataError(f"{url}: {got:,} bytes, but the corpus table pins {size:,}; "
                     "the download was deleted")  # fmt: skip


def _try(url: str, part: Path, size: int | None, bar: Progress | None) -> None:
    """One request appending to ``part`` from its current length."""
    offset = part.stat().st_size if part.exists() else 0
    headers = {"User-Agent": _agent()}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    request = urllib.request.Request(url, headers=headers)
    try:
        response = urllib.request.urlopen(request, timeout=TIMEOUT)  # noqa: S310 - http(s) only
    except urllib.error.HTTPError as e:
        if e.code == 416 and offset and size is not None and offset >= size:
            return  # all there already (or too much: the size check says so)
        if e.code == 416:
            part.unlink(missing_ok=True)
            raise _Dropped("the server refused to resume; starting over") from None
        if e.code >= 500:
            raise _Dropped(f"HTTP {e.code} {e.reason}") from None
        raise DataError(f"{url}: HTTP {e.code} {e.reason}") from None
    with response:
        total: int | None = None
        if response.status == 206:
            found = _RANGE.fullmatch(response.headers.get("Content-Range", ""))
            if found is None or int(found.group(1)) != offset:
                part.unlink(missing_ok=True)
                raise _Dropped("the server resumed at another offset; starting over")
            total = int(found.group(3)) if found.group(3) != "*" else None
        else:
            offset = 0  # the whole file again
            length = response.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
        if size is not None and total is not None and total != size:
            part.unlink(missing_ok=True)
            raise _size_error(url, total, size)
        if bar is not None:
            bar.reset(total=total)
            bar.update(offset)
        with open(part, "r+b" if offset else "wb") as f:
            f.seek(offset)
            f.truncate()
            written = offset
            while True:
                try:
                    block = response.read(BLOCK)
                except (http.client.IncompleteRead, OSError) as e:
                    raise _Dropped(str(e) or type(e).__name__) from None
                if not block:
                    break
                written += len(block)
                if size is not None and written > size:
                    f.close()
                    part.unlink(missing_ok=True)
                    raise _size_error(url, written, size)
                f.write(block)
                if bar is not None:
                    bar.update(len(block))
            f.flush()
            os.fsync(f.fileno())
        if total is not None and written < total:
            raise _Dropped(f"{written:,} of {total:,} bytes arrived")


def fetch(
    url: str,
    dest: Path,
    *,
    size: int | None,
    sha256: str | None,
    progress: bool = True,
    attempts: int = ATTEMPTS,
) -> str:
    """``url`` downloaded to ``dest`` (resuming ``dest.part``), checked; its SHA-256.

    A ``dest`` already there is checked again rather than fetched; one that
    does not match is deleted and fetched anew.
    """
    if dest.exists():
        if (size is None or dest.stat().st_size == size) and (
            sha256 is None or sha256_file(dest) == sha256
        ):
            return sha256_file(dest)
        dest.unlink()
    part = dest.with_name(dest.name + ".part")
    bar: Progress | None = None
    if progress:
        bar = progress_bar(size, unit="B", unit_scale=True, desc=dest.name, leave=False)
    try:
        for attempt in range(1, attempts + 1):
            try:
                _try(url, part, size, bar)
                break
            except _Dropped as e:
                if attempt == attempts:
                    kept = part.stat().st_size if part.exists() else 0
                    raise DataError(
                        f"{url}: the download broke off ({e}); {kept:,} bytes kept in {part}, "
                        "run the command again to resume"
                    ) from None
                time.sleep(min(2.0 ** (attempt - 1), 8.0) * 0.5)
            except (TimeoutError, urllib.error.URLError, ConnectionError) as e:
                reason = getattr(e, "reason", e)
                if attempt == attempts:
                    raise DataError(f"{url}: cannot download ({reason})") from None
                time.sleep(min(2.0 ** (attempt - 1), 8.0) * 0.5)
    finally:
        if bar is not None:
            bar.close()
    got = part.stat().st_size
    if size is not None and got != size:
        part.unlink()
        raise _size_error(url, got, size)
    digest = sha256_file(part)
    if sha256 is not None and digest != sha256:
        part.unlink()
        raise DataError(f"{url}: SHA-256 {digest[:16]}... is not the pinned {sha256[:16]}...; "
                        "the download was deleted and nothing was installed")  # fmt: skip
    os.replace(part, dest)
    return digest
