"""The real server (``attnkit serve`` in a subprocess, uvicorn): sockets, slow clients, load."""

from __future__ import annotations

import json
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import psutil
import pytest

from attnkit.cli.main import main

BODY = json.dumps({"text": ["forty-two"]}).encode()


def _raw(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    return s


def _read_all(s: socket.socket) -> bytes:
    chunks = []
    while True:
        try:
            chunk = s.recv(65536)
        except (ConnectionResetError, TimeoutError):
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def _headers(length: int | None, *, chunked: bool = False) -> bytes:
    lines = ["POST /v1/translate HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json"]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    if chunked:
        lines.append("Transfer-Encoding: chunked")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _translate(url: str, text: str = "forty-two", **options: Any) -> dict[str, Any]:
    r = httpx.post(url + "/v1/translate", json={"text": [text], **options}, timeout=30)
    assert r.status_code == 200, r.text
    return dict(r.json())


def test_binds_to_loopback_only(served_transformer):
    listening = [
        c.laddr
        for c in psutil.Process(served_transformer.process.pid).net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN
    ]
    assert listening and all(addr.ip == "127.0.0.1" for addr in listening), listening


def test_half_a_body_times_out_and_blocks_nobody(served_transformer):
    s = _raw(served_transformer.port)
    s.sendall(_headers(len(BODY)) + BODY[: len(BODY) // 2])  # ... and then nothing
    start = time.monotonic()
    for _ in range(3):  # others are served meanwhile
        assert _translate(served_transformer.url)["translations"]
    answered = time.monotonic() - start
    reply = _read_all(s)  # the server gives up on the slow body (--read-timeout 1.5)
    waited = time.monotonic() - start
    s.close()
    assert answered < 1.5, f"other clients waited {answered:.2f} s"
    assert reply.startswith(b"HTTP/1.1 408"), reply[:200]
    assert b'{"error": "body: not received within 1.5 s"}' in reply
    assert waited < 5


def test_half_the_headers_are_cut_off(served_transformer):
    s = _raw(served_transformer.port)
    s.sendall(b"POST /v1/translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-")  # stalls
    assert _translate(served_transformer.url)["translations"]
    start = time.monotonic()
    reply = _read_all(s)  # closed after the header timeout (= --read-timeout)
    s.close()
    assert reply == b"" and time.monotonic() - start < 5  # the socket itself waits 10 s


def test_a_chunked_body_over_the_limit_is_cut_off_while_streaming(served_transformer):
    s = _raw(served_transformer.port)
    s.sendall(_headers(None, chunked=True))
    chunk = b"x" * 65536
    try:
        for _ in range(8):  # 512 KiB against the default 256 KiB limit
            s.sendall(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server may already have answered and closed
    reply = _read_all(s)
    s.close()
    assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
    assert b"the limit is 262144" in reply


def test_a_lying_content_length_is_refused_without_reading(served_transformer):
    s = _raw(served_transformer.port)
    s.sendall(_headers(10**12))
    reply = _read_all(s)
    s.close()
    assert reply.startswith(b"HTTP/1.1 413") and b"Content-Length" in reply


def test_concurrent_clients_get_what_sequential_clients_get(served_transformer):
    url = served_transformer.url
    texts = ["one hundred", "forty-two", "seven", "nine hundred twelve", "eighty", "two"]
    jobs = [(t, {"beam": b}) for t in texts for b in (1, 4)] * 2
    sequential = [_translate(url, t, **o) for t, o in jobs]
    barrier = threading.Barrier(len(jobs))

    def one(job: tuple[str, dict[str, Any]]) -> dict[str, Any]:
        barrier.wait(30)
        return _translate(url, job[0], **job[1])

    with ThreadPoolExecutor(len(jobs)) as pool:
        concurrent = list(pool.map(one, jobs))
    for seq, con in zip(sequential, concurrent):
        assert con["translations"] == seq["translations"]
        assert con["nbest"][0][0]["text"] == seq["nbest"][0][0]["text"]
        assert con["scores"] == pytest.approx(seq["scores"], abs=1e-4)
    assert max(c["timing"]["batch_requests"] for c in concurrent) > 1
    assert all(s["timing"]["batch_requests"] == 1 for s in sequential)


def test_serve_refuses_bad_options(checkpoint, capsys):
    run = checkpoint("transformer")
    for argv, needle in (
        (["--max-batch-tokens", "0"], "--max-batch-tokens"),
        (["--max-wait-ms", "-1"], "--max-wait-ms"),
        (["--port", "70000"], "--port"),
        (["--read-timeout", "0"], "--read-timeout"),
    ):
        assert main(["serve", "--checkpoint", str(run), *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert needle in err and len(err.splitlines()) == 1


def test_the_listening_socket_says_it_is_tcp():
    """asyncio sets TCP_NODELAY only on sockets with proto IPPROTO_TCP; without it every
    answer waited ~40 ms for a delayed ACK (measured: 60 ms -> 22 ms per request)."""
    from attnkit.cli.serve import _bind

    sock = _bind("127.0.0.1", 0)
    try:
        assert sock.proto == socket.IPPROTO_TCP
    finally:
        sock.close()
