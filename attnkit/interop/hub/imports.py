"""Hub models by name as imports: ``attnkit import`` and ``hf:ORG/NAME`` checkpoints.

``import_named(fmt, name, out)`` is ``attnkit import --from hf ORG/NAME[@REV]``
(``--from gguf ORG/NAME[@REV]:FILE.gguf``): fetch through ``attnkit.interop.hub.client``,
then the ordinary importer (``hf.importer``, ``gguf.importer``) with the Hub's record
for ``import.json``.

``hub_checkpoint("hf:ORG/NAME[@REV][:FILE.gguf]")`` is what every command that
takes a checkpoint (``train --init``, ``serve --checkpoint``, ``generate`` ...)
does with such a name: the model is imported once into attnkit's cache
(``$ATTNKIT_CACHE_DIR``, see ``attnkit.data.cache.default_root``) under
``hub/ORG--NAME/COMMIT`` (``COMMIT-FILE`` for a GGUF file), keyed by the commit
the revision resolves to, and reused from then on: a second use asks the Hub
only which commit the revision names (nothing at all with ``HF_HUB_OFFLINE=1``),
downloads nothing and converts nothing. A cached import is trusted only when its
``import.json`` names the same repository, commit and file; the import writes it
last, atomically (``attnkit.interop.import_writer``), and a lock per key lets
one process import while the others (torchrun's ranks) wait for it.
"""

from __future__ import annotations

import contextlib
import fcntl
import sys
from collections.abc import Iterator
from pathlib import Path

from attnkit.errors import CheckpointError, UsageError
from attnkit.interop.hub import client as hub
from attnkit.interop.import_writer import read_import_record

PREFIX = "hf:"
GGUF = ".gguf"


def import_named(
    source_format: str,
    text: str,
    out: Path,
    *,
    overwrite: bool = False,
    keep_quantized: bool = False,
) -> Path:
    """``attnkit import --from hf|gguf NAME``: fetch ``text`` from the Hub and import it
    (``keep_quantized``: gguf only, ``import_gguf``'s)."""
    if source_format == "gguf":
        name = hub.parse_name(text, file_suffix=GGUF)
        from attnkit.interop.gguf.importer import import_gguf

        path, record = hub.download_file(name)
        return import_gguf(path, out, overwrite=overwrite, hub=record,
                           keep_quantized=keep_quantized)  # fmt: skip
    from attnkit.interop.hf.importer import import_hf

    folder, record = hub.download_model(hub.parse_name(text))
    return import_hf(folder, out, overwrite=overwrite, hub=record)


def is_hub_checkpoint(text: str | Path | None) -> bool:
    return isinstance(text, str) and text.startswith(PREFIX)


def parse_checkpoint(text: str) -> hub.HubName:
    """``hf:ORG/NAME[@REV]`` or ``hf:ORG/NAME[@REV]:FILE.gguf``."""
    rest = text.removeprefix(PREFIX)
    return hub.parse_name(rest, file_suffix=GGUF if ":" in rest else None)


def cache_dir(name: hub.HubName, commit: str) -> Path:
    """Where ``name`` at ``commit`` is (or will be) imported: ``CACHE/hub/ORG--NAME/COMMIT``."""
    from attnkit.data.cache import default_root

    key = commit if name.filename is None else f"{commit}-{name.filename.replace('/', '--')}"
    return default_root() / "hub" / name.repo.replace("/", "--") / key


def _trusted(directory: Path, name: hub.HubName, commit: str) -> bool:
    try:
        record = read_import_record(directory)["hub"] or {}
    except (CheckpointError, OSError):
        return False
    files = record.get("files") or {}
    return (
        record.get("repo") == name.repo
        and record.get("commit") == commit
        and (name.filename is None or name.filename in files)
    )


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    lock = directory.with_name(f".{directory.name}.lock")
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CheckpointError(
            f"{lock.parent}: cannot create attnkit's cache ({e.strerror or e}); "
            "set $ATTNKIT_CACHE_DIR"
        ) from None
    with open(lock, "a+b") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)  # stdout may be a command's output


def hub_checkpoint(text: str) -> Path:
    """The run directory of ``hf:ORG/NAME[@REV]`` imported into the cache (once)."""
    name = parse_checkpoint(text)
    resolved = hub.resolve(name)
    commit = resolved.commit if resolved is not None else _cached_commit(name)
    directory = cache_dir(name, commit)
    if _trusted(directory, name, commit):
        return directory
    with _locked(directory):
        if _trusted(directory, name, commit):  # another process imported it meanwhile
            return directory
        _say(f"{text}: importing {name.repo} at {commit[:12]} into {directory} (once)")
        record: dict[str, object]
        if name.filename is not None:
            from attnkit.interop.gguf.importer import import_gguf

            path, record = hub.download_file(name)
            import_gguf(path, directory, overwrite=True, hub=record)
        else:
            from attnkit.interop.hf.importer import import_hf

            folder, record = hub.fetch_model(name, resolved)
            import_hf(folder, directory, overwrite=True, hub=record)
    return directory


def _cached_commit(name: hub.HubName) -> str:
    """The commit the Hugging Face cache records for ``name``'s revision (offline)."""
    from huggingface_hub import constants
    from huggingface_hub.file_download import REGEX_COMMIT_HASH, repo_folder_name

    revision = name.revision or "main"
    if REGEX_COMMIT_HASH.fullmatch(revision):
        return revision
    storage = Path(constants.HF_HUB_CACHE) / repo_folder_name(repo_id=name.repo, repo_type="model")
    ref = storage / "refs" / revision
    try:
        return ref.read_text(encoding="utf-8").strip()
    except OSError:
        raise CheckpointError(
            f"{name} ({hub.endpoint()}): {hub.unreachable()} and the Hugging Face cache "
            f"({constants.HF_HUB_CACHE}) does not hold revision {revision!r}; "
            "download it once with the network on"
        ) from None


def pinned_name(directory: str | Path) -> str:
    """``hf:ORG/NAME@COMMIT`` of the cached import ``directory`` (what a run records)."""
    record = read_import_record(directory)["hub"] or {}
    name = hub.HubName(str(record["repo"]), str(record["commit"]))
    files = [f for f in record.get("files") or {} if f.endswith(GGUF)]
    return PREFIX + str(hub.HubName(name.repo, name.revision, files[0] if files else None))


def local_checkpoint(text: str) -> str:
    """``text`` as a local checkpoint path: an ``hf:`` name imported (once), else as given."""
    if not is_hub_checkpoint(text):
        return text
    if text == PREFIX:
        raise UsageError("hf:: name a model: hf:ORG/NAME[@REVISION]")
    return str(hub_checkpoint(text))
