"""A stand-in for the Hugging Face Hub on 127.0.0.1: what ``huggingface_hub`` asks for.

The endpoints and headers are those of the installed ``huggingface_hub`` (2.x:
read from its ``hf_api.py``, ``file_download.py`` and ``utils/_http.py``):

* ``GET /api/models/{repo}/revision/{rev}`` (``HfApi.model_info``): ``id``, ``sha``
  (the commit the revision resolves to) and ``siblings`` (``rfilename``);
* ``GET /api/models/{repo}/tree/{commit}?recursive=...`` (``list_repo_tree``, which
  ``snapshot_download`` calls): ``type``, ``path``, ``size``, ``oid`` and, for LFS
  files, ``lfs: {oid (its SHA-256), size, pointerSize}``; one page (no ``Link``);
* ``HEAD /{repo}/resolve/{rev}/{file}`` (``get_hf_file_metadata``):
  ``X-Repo-Commit``, ``ETag`` (the git blob id), ``X-Linked-Etag`` and
  ``X-Linked-Size`` for LFS files (their SHA-256 and size, which become the blob's
  name in the cache), ``Content-Length``;
* ``GET /{repo}/resolve/{rev}/{file}`` with ``Range: bytes=N-`` answered 206 and
  ``Content-Range`` (``http_get`` resumes a dropped connection that way);
* errors as the Hub sends them: ``X-Error-Code`` ``RepoNotFound`` (404, or 401 for a
  private repository without a token), ``RevisionNotFound``, ``EntryNotFound``,
  ``GatedRepo`` (403), which ``hf_raise_for_status`` turns into its exceptions.

No Xet headers are sent, so downloads take the plain HTTP path. Every request is
logged (``Hub.log``: method, path, Range), and ``Hub.drop`` makes file GETs close
the connection early: ``(file, times, after_bytes)``.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

LFS_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth", ".ckpt")


@dataclass
class Repo:
    """A repository: commits (sha -> {path: bytes or a file}), refs (name -> sha)."""

    commits: dict[str, dict[str, bytes | Path]] = field(default_factory=dict)
    refs: dict[str, str] = field(default_factory=dict)
    token: str | None = None  # private: only this bearer token sees it
    gated: bool = False

    def add(self, files: dict[str, bytes | Path], *, ref: str = "main") -> str:
        """A new commit holding ``files``, which ``ref`` then points at; returns its sha."""
        sha = hashlib.sha1(f"{len(self.commits)}{sorted(files)}".encode()).hexdigest()
        self.commits[sha] = dict(files)
        self.refs[ref] = sha
        return sha


def _read(content: bytes | Path) -> bytes:
    return content.read_bytes() if isinstance(content, Path) else content


class Hub:
    """The server; ``url`` goes into ``HF_ENDPOINT``."""

    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.log: list[tuple[str, str, str | None]] = []
        self.drop: tuple[str, int, int] | None = None  # (file, times, after_bytes)
        self._digests: dict[int, tuple[str, str]] = {}
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Hub:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def file_gets(self) -> list[str]:
        """The paths of the file downloads (GETs of ``/resolve/``) logged so far."""
        return [path for method, path, _ in self.log if method == "GET" and "/resolve/" in path]

    def digests(self, content: bytes | Path) -> tuple[str, str]:
        """``(git blob sha1, sha256)`` of a file, computed once."""
        with self._lock:
            key = id(content)
            if key not in self._digests:
                data = _read(content)
                blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
                self._digests[key] = (blob, hashlib.sha256(data).hexdigest())
            return self._digests[key]


_API = re.compile(r"/api/models/(?P<repo>[^/]+/[^/]+)(?:/(?P<kind>revision|tree)/(?P<rev>[^/]+))?")
_RESOLVE = re.compile(r"/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>.+)")


def _handler(hub: Hub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as httpx expects

        def log_message(self, *args: object) -> None:  # quiet
            pass

        def _send(self, status: int, body: bytes = b"", headers: dict | None = None) -> None:
            """Headers, then ``body`` (a HEAD: the headers a GET would have, no body)."""
            self.send_response(status)
            for key, value in (headers or {}).items():
                self.send_header(key, str(value))
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _error(self, status: int, code: str, message: str = "") -> None:
            headers = {"X-Error-Code": code, "Content-Type": "application/json"}
            if message:
                headers["X-Error-Message"] = message
            self._send(status, json.dumps({"error": message or code}).encode(), headers)

        def _repo(self, name: str) -> Repo | None:
            """The repository, or ``None`` after answering as the Hub does."""
            repo = hub.repos.get(name)
            if repo is None:
                self._error(401 if "Authorization" not in self.headers else 404, "RepoNotFound")
                return None
            if (
                repo.token is not None
                and self.headers.get("Authorization") != f"Bearer {repo.token}"
            ):
                self._error(401, "RepoNotFound", "Invalid username or password.")
                return None
            if repo.gated:
                self._error(403, "GatedRepo", "Access to model is restricted.")
                return None
            return repo

        def _commit(self, repo: Repo, rev: str) -> str | None:
            sha = repo.refs.get(rev, rev if rev in repo.commits else None)
            if sha is None:
                self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
            return sha

        def do_GET(self) -> None:
            self._route()

        def do_HEAD(self) -> None:
            self._route()

        def _route(self) -> None:
            path = unquote(urlsplit(self.path).path)
            hub.log.append((self.command, path, self.headers.get("Range")))
            api, resolve = _API.fullmatch(path), _RESOLVE.fullmatch(path)
            if api is not None:
                self._api(api["repo"], api["kind"] or "revision", api["rev"] or "main")
            elif resolve is not None:
                self._file(resolve["repo"], resolve["rev"], resolve["file"])
            else:
                self._error(404, "NotFound")

        def _api(self, name: str, kind: str, rev: str) -> None:
            repo = self._repo(name)
            sha = None if repo is None else self._commit(repo, rev)
            if repo is None or sha is None:
                return
            files = repo.commits[sha]
            if kind == "revision":
                body = {"id": name, "modelId": name, "sha": sha, "private": repo.token is not None,
                        "siblings": [{"rfilename": f} for f in sorted(files)]}  # fmt: skip
                self._send(200, json.dumps(body).encode(), {"Content-Type": "application/json"})
                return
            entries = []
            for f, content in sorted(files.items()):
                blob, sha256 = hub.digests(content)
                size = len(_read(content))
                entry = {"type": "file", "path": f, "size": size, "oid": blob}
                if f.endswith(LFS_SUFFIXES):
                    entry["lfs"] = {"oid": sha256, "size": size, "pointerSize": 134}
                entries.append(entry)
            self._send(200, json.dumps(entries).encode(), {"Content-Type": "application/json"})

        def _file(self, name: str, rev: str, filename: str) -> None:
            repo = self._repo(name)
            sha = None if repo is None else self._commit(repo, rev)
            if repo is None or sha is None:
                return
            content = repo.commits[sha].get(filename)
            if content is None:
                self._error(404, "EntryNotFound", f"{filename} does not exist at {sha}")
                return
            data = _read(content)
            blob, sha256 = hub.digests(content)
            headers = {"X-Repo-Commit": sha, "ETag": f'"{blob}"', "Accept-Ranges": "bytes"}
            if filename.endswith(LFS_SUFFIXES):
                headers |= {"X-Linked-Etag": f'"{sha256}"', "X-Linked-Size": len(data)}
            start = 0
            match = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range") or "")
            if match:
                start = int(match[1])
                headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
            status = 206 if match else 200
            drop = hub.drop
            if self.command == "GET" and drop is not None and drop[0] == filename and drop[1] > 0:
                hub.drop = (drop[0], drop[1] - 1, drop[2])
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, str(value))
                self.send_header("Content-Length", str(len(data) - start))
                self.end_headers()
                self.wfile.write(data[start : start + drop[2]])
                self.wfile.flush()
                self.close_connection = True  # the body ends early: the client must notice
                return
            self._send(status, data[start:], headers)

    return Handler
