"""``attnkit data get`` against a local HTTP mirror (127.0.0.1, ``ATTNKIT_DATA_MIRROR``):
checked install, resume after a dropped connection, corruption, a wrong size, a 404.

The corpus table here is the test's own (tiny files made below); the real table's
entries are checked in tests/data/test_corpora.py.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import tarfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import attnkit.data.corpora as corpora
from attnkit.cli.main import main

TEXT = "".join(f"line {i} of the first file\n" for i in range(400)).encode()  # ~10 kB
TSV = b"label\tsentence\r\n" + b"".join(b"%d\tsentence %d\r\n" % (i % 2, i) for i in range(50))


def _archive() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in (("top/LICENSE", b"CC0\n"), ("top/docs/readme.txt", b"hello\n")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


FILES = {"text.gz": gzip.compress(TEXT), "labels.tsv": TSV, "extra.tar.gz": _archive()}


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _table(path: Path) -> None:
    downloads = [
        {"name": n, "url": f"https://example.invalid/{n}", "size": len(b), "sha256": _sha(b),
         "checked": "made by the test"}
        for n, b in FILES.items()
    ]  # fmt: skip
    downloads[2].update(size=None, sha256=None, unpack="extra", max_unpacked=4096)
    tsv = TSV.replace(b"\r\n", b"\n")
    files = [
        {"path": "train.txt", "from": "text.gz", "steps": [{"op": "gunzip"}], "size": len(TEXT),
         "sha256": _sha(TEXT), "checked": "test"},
        {"path": "train.tsv", "from": "labels.tsv", "steps": [{"op": "lf"}], "size": len(tsv),
         "sha256": _sha(tsv), "checked": "test"},
        {"path": "LICENSE", "from": "extra/LICENSE", "steps": [], "size": 4,
         "sha256": _sha(b"CC0\n"), "checked": "test"},
    ]  # fmt: skip
    corpus = {"title": "A tiny corpus", "task": "lm", "source": "https://example.invalid",
              "license": "CC0 (test)", "license_url": "https://example.invalid/license",
              "reference": "none", "use": "--set data.dir=data/tiny",
              "downloads": downloads, "files": files}  # fmt: skip
    path.write_text(json.dumps({"format": 1, "corpora": {"tiny": corpus}}))


class Mirror:
    """What the server serves, how it misbehaves, and what it was asked."""

    def __init__(self) -> None:
        self.files = {f"/tiny/{n}": b for n, b in FILES.items()}
        self.drops: dict[str, int] = {}  # path -> how many more responses to cut short
        self.requests: list[tuple[str, str | None]] = []  # (path, Range header)
        self.ranges = True  # False: answer every request with the whole file (200)


def _handler(mirror: Mirror) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            mirror.requests.append((self.path, self.headers.get("Range")))
            data = mirror.files.get(self.path)
            if data is None:
                self.send_error(404, "Not Found")
                return
            start = 0
            if self.headers.get("Range") and mirror.ranges:
                start = int(self.headers["Range"].removeprefix("bytes=").split("-")[0])
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            else:
                self.send_response(200)
            self.send_header("Content-Length", str(len(data) - start))
            self.end_headers()
            body = data[start:]
            if mirror.drops.get(self.path, 0) > 0:
                mirror.drops[self.path] -= 1
                body = body[: len(body) // 3]  # then the connection closes: a drop
                self.close_connection = True
            self.wfile.write(body)

    return Handler


@pytest.fixture
def mirror(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Mirror]:
    state = Mirror()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    table = tmp_path / "table.json"
    _table(table)
    real = corpora.load_table
    monkeypatch.setattr(corpora, "load_table", lambda path=None: real(path or table))
    monkeypatch.setenv(corpora.MIRROR_ENV, f"http://127.0.0.1:{server.server_address[1]}")
    monkeypatch.setattr("attnkit.data.download.time.sleep", lambda s: None)
    monkeypatch.chdir(tmp_path)
    yield state
    server.shutdown()
    server.server_close()


def get(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["data", "get", "tiny", "--no-progress", *args])
    return code, out.getvalue()


def _nothing_left(tmp_path: Path) -> None:
    data = tmp_path / "data"
    assert not (data / "tiny").exists()
    left = [p.name for p in data.iterdir()] if data.exists() else []
    assert not [n for n in left if not n.startswith(".tiny.download")], left
    if (data / ".tiny.download").exists():  # resumable parts, and downloads that matched
        for p in (data / ".tiny.download").iterdir():  # their pin (checked again on reuse)
            assert p.name.endswith(".part") or _sha(p.read_bytes()) == _sha(FILES[p.name]), p


def test_get_installs_checked_files_prints_the_license_then_reuses(
    mirror: Mirror, tmp_path: Path
) -> None:
    code, out = get()
    assert code == 0 and "license: CC0 (test)" in out and "installed tiny in data/tiny" in out
    folder = tmp_path / "data" / "tiny"
    assert (folder / "train.txt").read_bytes() == TEXT
    assert (folder / "train.tsv").read_bytes() == TSV.replace(b"\r\n", b"\n")
    assert (folder / "LICENSE").read_bytes() == b"CC0\n"
    manifest = json.loads((folder / "attnkit-data.json").read_text())
    assert manifest["files"]["train.txt"] == {"size": len(TEXT), "sha256": _sha(TEXT),
                                              "pinned": True}  # fmt: skip
    assert [d["pinned"] for d in manifest["downloads"]] == [True, True, False]
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == ["tiny"]  # staging gone

    asked = len(mirror.requests)
    code, out = get()
    assert code == 0 and "already in data/tiny" in out and len(mirror.requests) == asked
    (folder / "train.txt").write_bytes(b"changed\n")  # damaged: ours, so replaced
    code, out = get()
    assert code == 0 and "installed" in out and (folder / "train.txt").read_bytes() == TEXT


def test_a_dropped_connection_resumes_with_a_range_request(mirror: Mirror) -> None:
    mirror.drops["/tiny/text.gz"] = 1
    code, _ = get("--to", "elsewhere/tiny")
    assert code == 0 and Path("elsewhere/tiny/train.txt").read_bytes() == TEXT
    ranges = [r for p, r in mirror.requests if p == "/tiny/text.gz"]
    assert ranges[0] is None and ranges[1] == f"bytes={len(FILES['text.gz']) // 3}-"


def test_a_server_that_ignores_the_range_starts_the_file_over(mirror: Mirror) -> None:
    mirror.drops["/tiny/text.gz"] = 1
    mirror.ranges = False
    code, _ = get()
    assert code == 0 and Path("data/tiny/train.txt").read_bytes() == TEXT


def test_a_download_broken_off_in_every_try_resumes_in_the_next_run(
    mirror: Mirror, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mirror.drops["/tiny/labels.tsv"] = 3  # every try of the first run
    code, _ = get()
    err = capsys.readouterr().err.strip()
    assert code == 1 and len(err.splitlines()) == 1 and "run the command again to resume" in err
    _nothing_left(tmp_path)
    part = tmp_path / "data" / ".tiny.download" / "labels.tsv.part"
    kept = part.stat().st_size
    assert 0 < kept < len(TSV)
    asked = len(mirror.requests)
    code, _ = get()
    assert code == 0 and (tmp_path / "data" / "tiny" / "train.tsv").is_file()
    again = mirror.requests[asked:]
    assert again[0] == ("/tiny/labels.tsv", f"bytes={kept}-")  # text.gz was kept: not asked


def test_corrupt_download_leaves_nothing_trusted(
    mirror: Mirror, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = bytearray(FILES["labels.tsv"])
    data[5] ^= 1
    mirror.files["/tiny/labels.tsv"] = bytes(data)  # same size, other bytes
    code, _ = get()
    err = capsys.readouterr().err.strip()
    assert code == 1 and len(err.splitlines()) == 1
    assert "SHA-256" in err and "nothing was installed" in err
    _nothing_left(tmp_path)
    assert not (tmp_path / "data" / ".tiny.download" / "labels.tsv.part").exists()


def test_wrong_size_is_refused(
    mirror: Mirror, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mirror.files["/tiny/text.gz"] = FILES["text.gz"] + b"more"
    code, _ = get()
    err = capsys.readouterr().err.strip()
    assert code == 1 and "but the corpus table pins" in err and len(err.splitlines()) == 1
    _nothing_left(tmp_path)


def test_a_converted_file_that_differs_installs_nothing(
    mirror: Mirror, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the archive is not pinned; the file made from it is, and catches the change
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("top/LICENSE")
        info.size = 4
        tar.addfile(info, io.BytesIO(b"MIT\n"))
    mirror.files["/tiny/extra.tar.gz"] = buf.getvalue()
    code, _ = get()
    err = capsys.readouterr().err.strip()
    assert code == 1 and "LICENSE came out as" in err and "nothing was installed" in err
    assert not (tmp_path / "data" / "tiny").exists()
    assert not (tmp_path / "data" / ".tiny.download").exists()


def test_404_and_foreign_folders_are_one_line_errors(
    mirror: Mirror, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    del mirror.files["/tiny/labels.tsv"]
    code, _ = get()
    err = capsys.readouterr().err.strip()
    assert code == 1 and "labels.tsv: HTTP 404" in err and len(err.splitlines()) == 1
    _nothing_left(tmp_path)

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    code, _ = get("--to", str(mine))
    err = capsys.readouterr().err.strip()
    assert code == 2 and "is not a corpus 'data get' made" in err
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]

    other = tmp_path / "other"  # another corpus's folder is not replaced either
    other.mkdir()
    (other / "attnkit-data.json").write_text(json.dumps({"corpus": "sst2"}))
    code, _ = get("--to", str(other))
    assert code == 2 and "exists and holds sst2" in capsys.readouterr().err


def test_list_shows_size_license_and_source(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["data", "list"]) == 0
    out = capsys.readouterr().out
    assert "multi30k" in out and "CC BY-SA 4.0" in out and "github.com/karpathy/char-rnn" in out
    assert main(["data", "list", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {r["name"] for r in rows} >= {"multi30k", "sst2", "tinyshakespeare", "squad"}
    assert all(r["license"] and r["source"] for r in rows)
