"""The corpora ``attnkit data get`` knows: a table (``corpora.json``), read into typed records.

The table is data, not code: each corpus names its downloads (a pinned URL,
size and SHA-256 where they are known) and the files it installs, each made
from one download (or a folder of an unpacked archive) by a list of named
steps (``attnkit.data.corpus_steps``), with the size and SHA-256 of the
result where it is pinned. Every entry says in ``checked`` how its digest
was obtained: computed here from the upstream repository's git objects at
the pinned commit, taken from another project's checksum list, or not
pinned at all (then a file made from it must be pinned, or the manifest
records what was found: ``Corpus.unpinned``).

``ATTNKIT_DATA_MIRROR`` (a base URL) fetches every download from
``{mirror}/{corpus}/{download name}`` instead (a local mirror, a proxy, the tests).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from attnkit.errors import DataError, UsageError

MIRROR_ENV = "ATTNKIT_DATA_MIRROR"
TABLE_FORMAT = 1
_HEX = set("0123456789abcdef")


@dataclass(frozen=True)
class Download:
    """One file fetched from ``url``; ``unpack``: a ``.tar.gz`` unpacked into that folder
    (its one top folder removed), at most ``max_unpacked`` bytes."""

    name: str
    url: str
    size: int | None
    sha256: str | None
    checked: str
    unpack: str | None = None
    max_unpacked: int | None = None


@dataclass(frozen=True)
class Step:
    """A named step (``corpus_steps.STEPS``) and its arguments."""

    op: str
    args: dict[str, object]


@dataclass(frozen=True)
class CorpusFile:
    """A file of the installed corpus: ``steps`` applied to ``source`` (a download's
    name, or a path inside an unpacked download), giving ``size`` bytes of ``sha256``."""

    path: str
    source: str
    steps: tuple[Step, ...]
    size: int | None
    sha256: str | None
    checked: str


@dataclass(frozen=True)
class Corpus:
    name: str
    title: str
    task: str
    source: str
    license: str
    license_url: str
    reference: str
    use: str
    downloads: tuple[Download, ...]
    files: tuple[CorpusFile, ...]

    @property
    def download_size(self) -> int | None:
        """Bytes fetched, or ``None`` when a download's size is not pinned."""
        sizes = [d.size for d in self.downloads]
        return None if any(s is None for s in sizes) else sum(s for s in sizes if s is not None)

    @property
    def installed_size(self) -> int | None:
        """Bytes of the installed files, or ``None`` when one is not pinned."""
        sizes = [f.size for f in self.files]
        return None if any(s is None for s in sizes) else sum(s for s in sizes if s is not None)

    @property
    def unpinned(self) -> list[str]:
        """The files whose bytes nothing pins (no digest of their own, and one of their
        downloads has none): ``data get`` records what it found and says so."""
        pinned = {d.unpack or d.name for d in self.downloads if d.sha256}
        return [f.path for f in self.files if not f.sha256 and _download_of(f) not in pinned]

    def url(self, download: Download) -> str:
        """Where ``download`` comes from: its pinned URL, or the mirror's copy."""
        mirror = os.environ.get(MIRROR_ENV, "").strip()
        if mirror:
            return f"{mirror.rstrip('/')}/{self.name}/{download.name}"
        return download.url


def _download_of(f: CorpusFile) -> str:
    return f.source.split("/", 1)[0]


def _digest(value: object, where: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) != 64 or not set(value) <= _HEX:
        raise DataError(f"{where}.sha256: expected 64 lower-case hex digits, got {value!r}")
    return value


def _size(value: object, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise DataError(f"{where}.size: expected a byte count, got {value!r}")
    return value


def _name(value: object, where: str) -> str:
    """A relative path without ``..`` (the table must not write outside the corpus folder)."""
    if not isinstance(value, str) or not value or value.startswith("/") or ".." in value.split("/"):
        raise DataError(f"{where}: expected a relative path inside the corpus, got {value!r}")
    return value


def _corpus(name: str, raw: dict[str, Any], where: str) -> Corpus:
    from attnkit.data.corpus_steps import STEPS

    try:
        downloads = tuple(
            Download(
                name=_name(d["name"], f"{where}.downloads[{i}].name"),
                url=str(d["url"]),
                size=_size(d.get("size"), f"{where}.downloads[{i}]"),
                sha256=_digest(d.get("sha256"), f"{where}.downloads[{i}]"),
                checked=str(d["checked"]),
                unpack=d.get("unpack"),
                max_unpacked=d.get("max_unpacked"),
            )  # fmt: skip
            for i, d in enumerate(raw["downloads"])
        )
        files = []
        for i, f in enumerate(raw["files"]):
            at = f"{where}.files[{i}]"
            steps = tuple(Step(s["op"], {k: v for k, v in s.items() if k != "op"})
                          for s in f["steps"])  # fmt: skip
            for s in steps:
                if s.op not in STEPS:
                    raise DataError(f"{at}: unknown step {s.op!r} (known: {', '.join(STEPS)})")
            files.append(CorpusFile(
                path=_name(f["path"], f"{at}.path"), source=_name(f["from"], f"{at}.from"),
                steps=steps, size=_size(f.get("size"), at),
                sha256=_digest(f.get("sha256"), at), checked=str(f["checked"]),
            ))  # fmt: skip
        corpus = Corpus(
            name=name, title=raw["title"], task=raw["task"], source=raw["source"],
            license=raw["license"], license_url=raw["license_url"],
            reference=raw["reference"], use=raw["use"], downloads=downloads, files=tuple(files),
        )  # fmt: skip
    except (KeyError, TypeError, AttributeError) as e:
        raise DataError(f"{where}: malformed entry ({type(e).__name__}: {e})") from None
    known = {d.name for d in downloads} | {d.unpack for d in downloads if d.unpack}
    for f in corpus.files:
        if _download_of(f) not in known:
            raise DataError(f"{where}: {f.path} is made from {f.source}, which no download names")
    return corpus


def load_table(path: str | Path | None = None) -> dict[str, Corpus]:
    """The corpus table: the package's ``corpora.json``, or the file ``path`` (tests)."""
    where = str(path) if path is not None else "attnkit/data/corpora.json"
    try:
        if path is None:
            text = resources.files("attnkit.data").joinpath("corpora.json").read_text("utf-8")
        else:
            text = Path(path).read_text(encoding="utf-8")
        raw = json.loads(text)
    except (OSError, ValueError) as e:
        raise DataError(f"{where}: cannot read the corpus table ({e})") from None
    if not isinstance(raw, dict) or raw.get("format") != TABLE_FORMAT:
        raise DataError(f"{where}: expected a corpus table of format {TABLE_FORMAT}")
    return {n: _corpus(n, c, f"{where}: {n}") for n, c in raw["corpora"].items()}


def find_corpus(name: str, table: dict[str, Corpus]) -> Corpus:
    """The table's entry ``name``; a ``UsageError`` listing the known names otherwise."""
    if name not in table:
        import difflib

        close = difflib.get_close_matches(name, list(table), n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise UsageError(f"{name}: not a corpus attnkit knows{hint} "
                         f"(known: {', '.join(table)}; see 'attnkit data list')")  # fmt: skip
    return table[name]
