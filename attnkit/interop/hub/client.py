"""Models by name from the Hugging Face Hub: the one place attnkit talks to the Hub.

``attnkit import --from hf ORG/NAME[@REVISION]`` and ``--from gguf
ORG/NAME[@REVISION]:FILE.gguf`` fetch through ``huggingface_hub``
(``snapshot_download(allow_patterns=...)``, ``hf_hub_download``) into its own
cache, so everything users set for it holds: ``HF_HOME``/``HF_HUB_CACHE``,
``HF_HUB_OFFLINE=1``, tokens (``HF_TOKEN``, ``hf auth login``), mirrors
(``HF_ENDPOINT``) and its progress bars (``HF_HUB_DISABLE_PROGRESS_BARS``).

Only what the import reads is fetched: ``config.json``, ``tokenizer.json``,
``tokenizer_config.json`` and ``model.safetensors`` (or the shards that
``model.safetensors.index.json`` names), never a pickle (``*.bin``, ``*.pt``,
``*.pth``, ``*.ckpt``): a repository whose weights are only pickles is refused
before anything is downloaded, naming those files. The revision (a branch, a
tag or a commit) is resolved to its commit once (``resolve``), and the record
for ``import.json`` holds the repository, the revision asked for, that commit,
the endpoint and each fetched file's SHA-256 (computed here; a file the Hub
stored in LFS must match the SHA-256 the Hub gave for it).

Every failure is one ``CheckpointError`` line saying what to do
(``hub_errors``): a repository or revision that does not exist (404), one
that needs a token (401/403: gated or private), offline with nothing cached,
an interrupted download (``huggingface_hub`` resumes a dropped connection a
few times itself; what it gives up on leaves no partial file in its cache).
``attnkit.interop.hub.imports`` builds ``hf:ORG/NAME`` checkpoints on this.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from attnkit.errors import CheckpointError, UsageError
from attnkit.interop.hf.files import CONFIG, INDEX, TOKENIZER, TOKENIZER_CONFIG, WEIGHTS

# ORG/NAME as the Hub spells repository ids (huggingface_hub validates the rest).
_REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]*/[A-Za-z0-9_.\-]+")
_SHA256 = re.compile(r"[0-9a-f]{64}")
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
SIDE_FILES = (CONFIG, TOKENIZER, TOKENIZER_CONFIG)
LOGIN = "set HF_TOKEN or run `hf auth login` (huggingface-cli login)"


@dataclass(frozen=True)
class HubName:
    """``ORG/NAME[@REVISION][:FILE]`` as typed; ``revision`` None means the default branch."""

    repo: str
    revision: str | None = None
    filename: str | None = None

    def __str__(self) -> str:
        rev = f"@{self.revision}" if self.revision else ""
        return f"{self.repo}{rev}" + (f":{self.filename}" if self.filename else "")


@dataclass(frozen=True)
class Resolved:
    """A repository at one commit, with its file list (``None`` when offline)."""

    name: HubName
    commit: str
    files: tuple[str, ...] | None


def looks_like_repo(text: str) -> bool:
    """Whether ``text`` reads as ``ORG/NAME[@REV][:FILE]`` rather than a local path."""
    if text.startswith((".", "/", "~")) or "\\" in text:
        return False
    return _REPO.fullmatch(text.split(":", 1)[0].split("@", 1)[0]) is not None


def parse_name(text: str, *, file_suffix: str | None = None) -> HubName:
    """``ORG/NAME[@REV]``, with ``:FILE`` (ending in ``file_suffix``) when that is given."""
    head, _, filename = text.partition(":") if file_suffix else (text, "", "")
    repo, _, revision = head.partition("@")
    if _REPO.fullmatch(repo) is None or (head.count("@") > 1) or ("@" in head and not revision):
        form = "ORG/NAME[@REVISION]" + (f":FILE{file_suffix}" if file_suffix else "")
        raise UsageError(f"{text}: not a Hugging Face Hub model name ({form})")
    if file_suffix and not filename.endswith(file_suffix):
        raise UsageError(f"{text}: name the file in the repository: {repo}:FILE{file_suffix}")
    return HubName(repo, revision or None, filename or None)


def endpoint() -> str:
    from huggingface_hub import constants

    return str(constants.ENDPOINT)


def _offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def unreachable() -> str:
    """Why the Hub was not asked: offline mode, or no answer (check HF_ENDPOINT)."""
    if _offline():
        return "HF_HUB_OFFLINE is set (unset it to download)"
    return "the Hub cannot be reached (check the network, or HF_ENDPOINT)"


def _status(e: BaseException) -> int | None:
    response = getattr(e, "response", None)
    return getattr(response, "status_code", None)


def _transport(e: BaseException) -> bool:
    """A network failure from huggingface_hub's HTTP client (httpx, httpx2 or requests)."""
    return any(
        (t.__module__ or "").split(".")[0] in ("httpx", "httpx2", "requests", "urllib3")
        for t in type(e).__mro__
    )


@contextlib.contextmanager
def hub_errors(name: HubName) -> Iterator[None]:
    """Turn what ``huggingface_hub`` raises into one ``CheckpointError`` line."""
    from huggingface_hub import errors

    where = f"{name} ({endpoint()})"
    # huggingface_hub < 1.0 has no RemoteEntryNotFoundError: its EntryNotFoundError, after
    # LocalEntryNotFoundError (a subclass there) has been caught.
    remote_missing = getattr(errors, "RemoteEntryNotFoundError", errors.EntryNotFoundError)
    try:
        yield
    except errors.GatedRepoError:
        raise CheckpointError(
            f"{where}: a gated repository: accept its terms on its page on the Hub, then {LOGIN}"
        ) from None
    except errors.RevisionNotFoundError:
        raise CheckpointError(
            f"{where}: no revision {name.revision!r} in {name.repo} (a branch, tag or commit)"
        ) from None
    except errors.LocalEntryNotFoundError:
        raise CheckpointError(
            f"{where}: {unreachable()} and the Hugging Face cache does not hold it; "
            "download it once with the network on"
        ) from None
    except remote_missing:
        raise CheckpointError(f"{where}: no file {name.filename!r} in {name.repo}") from None
    except errors.RepositoryNotFoundError as e:
        private = "" if _status(e) == 404 else f", or it is private or gated: {LOGIN}"
        raise CheckpointError(
            f"{where}: no model repository {name.repo!r} on the Hub (check the name){private}"
        ) from None
    except errors.HfHubHTTPError as e:
        status = _status(e)
        if status in (401, 403):
            raise CheckpointError(f"{where}: access denied (HTTP {status}); {LOGIN}") from None
        raise CheckpointError(f"{where}: the Hub answered HTTP {status}; try again") from None
    except errors.HFValidationError as e:
        raise UsageError(f"{name}: {str(e).splitlines()[0]}") from None
    except Exception as e:
        if not (_transport(e) or (isinstance(e, OSError) and "Consistency check" in str(e))):
            raise
        detail = " ".join(str(e).split())[:200]
        raise CheckpointError(
            f"{where}: the download was interrupted ({type(e).__name__}: {detail}); no partial "
            "file is kept in the cache; run the command again"
        ) from None


def resolve(name: HubName) -> Resolved | None:
    """The commit ``name`` points at now and its file list; ``None`` when the Hub cannot
    answer (offline, no connection): the cache's own record of the revision decides then,
    as it does for ``huggingface_hub``."""
    from huggingface_hub import HfApi, errors

    try:
        info = HfApi().model_info(name.repo, revision=name.revision)
    except errors.OfflineModeIsEnabled:
        return None
    except Exception as e:
        if _transport(e):
            return None
        with hub_errors(name):
            raise
        raise  # hub_errors re-raises what it does not know
    if not info.sha:
        raise CheckpointError(f"{name} ({endpoint()}): the Hub gave no commit for it")
    files = tuple(s.rfilename for s in info.siblings or ())
    return Resolved(name, info.sha, files)


def model_files(resolved: Resolved) -> list[str]:
    """What the import reads from the repository's listing; a pickle-only one is refused."""
    files = set(resolved.files or ())
    weights = [WEIGHTS] if WEIGHTS in files else [INDEX] if INDEX in files else []
    if not weights:
        pickles = sorted(f for f in files if f.endswith(PICKLE_SUFFIXES))
        what = (
            f"holds only pickled weights ({', '.join(pickles[:4])}), which attnkit never loads "
            "(unpickling can run code); ask its authors for model.safetensors, or convert it "
            "with a tool you trust"
            if pickles
            else f"holds no {WEIGHTS} (nor {INDEX}); not a transformers model attnkit can import"
        )
        raise CheckpointError(f"{resolved.name}@{resolved.commit[:12]} ({endpoint()}): {what}")
    if CONFIG not in files:
        raise CheckpointError(f"{resolved.name} ({endpoint()}): no {CONFIG} in the repository")
    return sorted({*weights, *(f for f in SIDE_FILES if f in files)})


def _shards(index: Path) -> list[str]:
    from attnkit.checkpoints.safe_files import read_json

    data = read_json(index, 64 << 20)
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict):
        raise CheckpointError(f"{index}: no 'weight_map' object")
    shards = sorted({str(v) for v in weight_map.values()})
    bad = [s for s in shards if Path(s).name != s or not s.endswith(".safetensors")]
    if bad:
        raise CheckpointError(f"{index}: shard name {bad[0]!r} is not a safetensors file beside it")
    return shards


def download_model(name: HubName) -> tuple[Path, dict[str, object]]:
    """``(snapshot directory, hub record)`` for the model ``name``, fetched if needed."""
    resolved = resolve(name)
    return fetch_model(name, resolved)


def fetch_model(name: HubName, resolved: Resolved | None) -> tuple[Path, dict[str, object]]:
    """Fetch what the import reads of ``name`` at ``resolved``'s commit (offline: the
    cache's); returns the snapshot directory and the record for ``import.json``."""
    from huggingface_hub import snapshot_download

    wanted = model_files(resolved) if resolved is not None else [*SIDE_FILES, WEIGHTS, INDEX]
    with hub_errors(name):
        # By the revision's name, not the commit: the cache then records which commit the
        # name pointed at (refs/), which HF_HUB_OFFLINE=1 reads later.
        folder = Path(snapshot_download(name.repo, revision=name.revision, allow_patterns=wanted))
        _same_commit(name, resolved, folder.name)
        if not (folder / WEIGHTS).is_file() and (folder / INDEX).is_file():
            shards = _shards(folder / INDEX)
            snapshot_download(name.repo, revision=folder.name, allow_patterns=shards)
            wanted += shards
    fetched = [f for f in wanted if (folder / f).is_file()]
    return folder, record(name, folder.name, folder, fetched)


def download_file(name: HubName) -> tuple[Path, dict[str, object]]:
    """``(local file, hub record)`` for ``ORG/NAME[@REV]:FILE`` (a GGUF file), fetched if needed."""
    from huggingface_hub import hf_hub_download

    assert name.filename is not None
    resolved = resolve(name)
    if resolved is not None and name.filename not in (resolved.files or ()):
        ggufs = sorted(f for f in resolved.files or () if f.endswith(".gguf"))
        have = f"; its .gguf files: {', '.join(ggufs[:6])}" if ggufs else "; it has no .gguf file"
        raise CheckpointError(f"{name} ({endpoint()}): no file {name.filename!r}{have}")
    with hub_errors(name):
        path = Path(hf_hub_download(name.repo, name.filename, revision=name.revision))
    folder = path.parents[len(Path(name.filename).parts) - 1]  # snapshots/<commit>
    _same_commit(name, resolved, folder.name)
    return path, record(name, folder.name, folder, [name.filename])


def _same_commit(name: HubName, resolved: Resolved | None, commit: str) -> None:
    if resolved is not None and commit != resolved.commit:
        raise CheckpointError(
            f"{name} ({endpoint()}): the revision moved from {resolved.commit[:12]} to "
            f"{commit[:12]} during the download; run the command again"
        )


def sha256_of(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def record(name: HubName, commit: str, folder: Path, fetched: list[str]) -> dict[str, object]:
    """The ``hub`` entry of ``import.json``: where the files came from and their SHA-256.

    A file stored in LFS sits in the cache under the SHA-256 the Hub gave for it
    (its blob's name): a file whose bytes do not match is refused, naming it.
    """
    files: dict[str, str] = {}
    for rel in sorted(fetched):
        path = folder / rel
        digest = sha256_of(path)
        blob = path.resolve().name
        if _SHA256.fullmatch(blob) and blob != digest:
            raise CheckpointError(
                f"{path}: its content's SHA-256 is {digest[:12]}..., not the Hub's "
                f"{blob[:12]}...; the cached file is damaged: delete {path.resolve()} "
                "and run the command again"
            )
        files[rel] = digest
    return {
        "repo": name.repo,
        "revision": name.revision or "main",
        "commit": commit,
        "endpoint": endpoint(),
        "files": files,
    }
