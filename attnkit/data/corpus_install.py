"""Install a corpus of the table into a folder: download, check, convert, check, swap in.

``install(corpus, to)``:

1. downloads go to ``.{to}.download/`` beside ``to`` (``download.fetch``:
   resumable ``.part`` files, each checked against its pinned size and
   SHA-256; a mismatch deletes it); an archive is unpacked there (only
   regular files and folders, at most its ``max_unpacked`` bytes);
2. each file is made by its steps (``corpus_steps``) into a staged folder
   (``attnkit.output_paths.staged_directory``), and checked against its pinned
   size and SHA-256;
3. ``attnkit-data.json`` (the corpus, its license and source, every file's
   size and SHA-256, what was pinned) is written last, and the staged folder
   is renamed into place; the download folder is then removed.

So ``to`` either does not exist, or holds a complete, checked corpus with its
manifest: an interrupted or failed run leaves at most the hidden download
folder (whose ``.part`` files the next run resumes). A ``to`` that already
holds the corpus is checked (sizes and digests) and kept; one that holds an
older or damaged copy made by ``data get`` is replaced; anything else there
is refused.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import shutil
import tarfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from attnkit import jsonio
from attnkit.data.corpora import Corpus, CorpusFile, Download
from attnkit.data.corpus_steps import STEPS, Value
from attnkit.data.download import fetch, sha256_file
from attnkit.errors import DataError, UsageError

MANIFEST = "attnkit-data.json"
MANIFEST_FORMAT = 1
Log = Callable[[str], None]


def read_manifest(folder: Path) -> dict[str, object] | None:
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) else None


def installed(corpus: Corpus, folder: Path) -> bool:
    """Whether ``folder`` holds this corpus as the table pins it, every file intact."""
    manifest = read_manifest(folder)
    if manifest is None or manifest.get("corpus") != corpus.name:
        return False
    files = manifest.get("files")
    if not isinstance(files, dict) or set(files) != {f.path for f in corpus.files}:
        return False
    for f in corpus.files:
        recorded = files[f.path]
        path = folder / f.path
        if f.sha256 is not None and recorded.get("sha256") != f.sha256:
            return False  # made under another table
        if not path.is_file() or path.stat().st_size != recorded.get("size"):
            return False
        if sha256_file(path) != recorded.get("sha256"):
            return False
    return True


@contextlib.contextmanager
def _exclusive(lock: Path) -> Iterator[None]:
    with open(lock, "a+b") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DataError(f"{lock}: another 'attnkit data get' is downloading there") from None
        yield


def _unpack(download: Download, archive: Path, into: Path) -> None:
    """The ``.tar.gz`` ``archive`` unpacked into ``into``, its one top folder removed."""
    limit = download.max_unpacked or (1 << 30)
    tmp = into.with_name(into.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        with tarfile.open(archive, "r:gz") as tar:
            members = tar.getmembers()
            total = sum(m.size for m in members if m.isfile())
            if total > limit:
                raise DataError(f"{download.name}: unpacks to {total:,} bytes, more than the "
                                f"{limit:,} the corpus table allows")  # fmt: skip
            tops = {m.name.split("/", 1)[0] for m in members}
            if len(tops) != 1:
                raise DataError(f"{download.name}: expected one top folder, got {len(tops)}")
            for m in members:
                if not (m.isfile() or m.isdir()):
                    continue  # links and devices are not part of any corpus
                m.name = m.name.split("/", 1)[1] if "/" in m.name else "."
                tar.extract(m, tmp, filter="data")
    except (tarfile.TarError, OSError, EOFError) as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise DataError(f"{download.name}: not a readable .tar.gz archive ({e})") from None
    shutil.rmtree(into, ignore_errors=True)
    tmp.rename(into)


def _make(corpus: Corpus, f: CorpusFile, downloads: Path, out: Path) -> dict[str, object]:
    source = downloads / f.source
    if not source.exists():
        raise DataError(f"{corpus.name}: {f.source} is not in the download (for {f.path})")
    value: Value = source
    try:
        for step in f.steps:
            value = STEPS[step.op](value, step.args)
    except DataError as e:
        raise DataError(f"{corpus.name}: {f.path} from {f.source}: {e}") from None
    target = out / f.path
    target.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(value, Path):
        shutil.copyfile(value, target)
    else:
        target.write_bytes(value)
    size, digest = target.stat().st_size, sha256_file(target)
    if f.size is not None and size != f.size or f.sha256 is not None and digest != f.sha256:
        raise DataError(
            f"{corpus.name}: {f.path} came out as {size:,} bytes, SHA-256 {digest[:16]}..., "
            f"not the pinned {f.size or 0:,} bytes, {str(f.sha256)[:16]}...; nothing was installed"
        )
    return {"size": size, "sha256": digest, "pinned": f.sha256 is not None}


def _source_text(corpus: Corpus, urls: dict[str, str]) -> str:
    lines = [corpus.title, "", f"Source:    {corpus.source}", f"License:   {corpus.license}",
             f"           {corpus.license_url}", f"Reference: {corpus.reference}", "",
             "Made by 'attnkit data get' from:"]  # fmt: skip
    lines += [f"  {d.name}  <- {urls[d.name]}" for d in corpus.downloads]
    lines += ["", "Files (steps from the download, see attnkit/data/corpus_steps.py):"]
    for f in corpus.files:
        steps = ", ".join(s.op for s in f.steps) or "copied"
        lines.append(f"  {f.path}  <- {f.source} ({steps})")
    return "\n".join(lines) + "\n"


def install(corpus: Corpus, to: Path, *, progress: bool = True, log: Log = print) -> bool:
    """Put ``corpus`` into folder ``to``; ``False`` when it was already there (checked)."""
    from attnkit.output_paths import staged_directory

    if to.exists() and not to.is_dir():
        raise UsageError(f"--to {to}: is not a directory")
    if to.is_dir() and installed(corpus, to):
        return False
    manifest = read_manifest(to)
    ours = manifest is not None and manifest.get("corpus") == corpus.name  # another corpus: kept
    if to.is_dir() and any(to.iterdir()) and not ours:
        held = f"holds {manifest.get('corpus')}" if manifest else "is not a corpus 'data get' made"
        raise UsageError(f"--to {to}: exists and {held}; remove it or choose another --to")
    to.parent.mkdir(parents=True, exist_ok=True)
    work = to.parent / f".{to.name}.download"
    work.mkdir(exist_ok=True)
    urls = {d.name: corpus.url(d) for d in corpus.downloads}
    with _exclusive(to.parent / f".{to.name}.download.lock"):
        digests: dict[str, str] = {}
        for d in corpus.downloads:
            log(f"{corpus.name}: {d.name} <- {urls[d.name]}")
            digests[d.name] = fetch(urls[d.name], work / d.name, size=d.size, sha256=d.sha256,
                                    progress=progress)  # fmt: skip
            if d.unpack:
                _unpack(d, work / d.name, work / d.unpack)
        try:
            with staged_directory(to, overwrite=ours, option="--to") as out:
                files = {f.path: _make(corpus, f, work, out) for f in corpus.files}
                (out / "SOURCE.txt").write_text(_source_text(corpus, urls), encoding="utf-8")
                record = {
                    "format": MANIFEST_FORMAT, "corpus": corpus.name, "title": corpus.title,
                    "license": corpus.license, "license_url": corpus.license_url,
                    "source": corpus.source,
                    "downloads": [{"name": d.name, "url": urls[d.name], "sha256": digests[d.name],
                                   "pinned": d.sha256 is not None} for d in corpus.downloads],
                    "files": files, "created": time.strftime("%Y-%m-%d %H:%M:%S"),
                }  # fmt: skip
                text = jsonio.dumps(record, indent=1) + "\n"
                (out / MANIFEST).write_text(text, encoding="utf-8")  # last: the folder is whole
        except DataError:
            shutil.rmtree(work, ignore_errors=True)  # what made a wrong file is not kept either
            raise
    shutil.rmtree(work, ignore_errors=True)
    (to.parent / f".{to.name}.download.lock").unlink(missing_ok=True)
    return True
