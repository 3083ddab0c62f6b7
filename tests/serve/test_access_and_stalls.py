"""The real server (``attnkit serve``, uvicorn) against hostile or unlucky clients.

* ``Host`` headers naming another site are refused (DNS rebinding), the server's own
  addresses and ``--allowed-hosts`` are served;
* with an API key (from ``ATTNKIT_API_KEY``) the ``openai`` client needs it;
* clients that ask for 8 choices of 1,024 tokens, read one chunk and stop reading
  neither starve a small request (it answers within 2 s) nor keep the worker busy:
  their streams are cancelled after ``--stall-timeout``;
* a shutdown with such streams in flight is quiet (no ``Task was destroyed``).

The model is a tiny random rotary decoder with a 1,200-token context (so 1,024-token
choices join the continuous batch) whose EOS can never win a greedy pick (its output
row is zero), so a greedy stream runs to ``max_tokens``.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import torch
from chat_helpers import chatml_tokenizer
from server_helpers import Served, start_server, stop_server

from attnkit.checkpoints import save_checkpoint
from attnkit.models.decoder_only import DecoderOnlyLM
from attnkit.models.lm_config import DecoderOnlyConfig

pytestmark = pytest.mark.slow  # servers in subprocesses: ~20 s in all on 2 cores

KEY = "sk-test-4f1c"
STALL_S = 1.0  # short: 8 x 1,024 tokens must still be running when it passes
ALLOWED = "good.example,.corp.example"
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
BIG = {"model": "m", "messages": QUESTION, "n": 8, "max_tokens": 1024, "temperature": 0,
       "stream": True}  # fmt: skip


@pytest.fixture(scope="module")
def long_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    tok = chatml_tokenizer()
    config = DecoderOnlyConfig.from_preset(
        "small", d_model=32, num_heads=2, d_ff=64, num_layers=1, max_len=1200,
        vocab_size=tok.vocab_size, pad_id=0, bos_id=1, eos_id=2, dropout=0.0,
        positions="rotary",
    )  # fmt: skip
    model = DecoderOnlyLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight[config.eos_id].zero_()  # logit 0: never the greedy pick
    out = tmp_path_factory.mktemp("stalls") / "long"
    save_checkpoint(out, model_state=model.state_dict(), config=config.to_dict(),
                    tokenizer_json=tok.to_json())  # fmt: skip
    return out


@pytest.fixture(scope="module")
def served(long_run: Path) -> Iterator[Served]:
    """The server with an API key from the environment (not on the command line)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ATTNKIT_API_KEY", KEY)
        server = start_server(long_run, "--allowed-hosts", ALLOWED,
                              "--stall-timeout", str(STALL_S))  # fmt: skip
    yield server
    stop_server(server)


def _request(port: int, path: str, host: str | None, *, key: str | None = KEY,
             body: dict[str, Any] | None = None) -> tuple[int, dict[str, bytes], Any]:  # fmt: skip
    """One request over a raw socket with exactly these headers; status, headers, JSON."""
    data = json.dumps(body).encode() if body is not None else b""
    version = "1.1" if host is not None else "1.0"  # HTTP/1.1 needs a Host (h11 checks)
    lines = [f"{'POST' if body is not None else 'GET'} {path} HTTP/{version}", "Connection: close"]
    lines += [f"Host: {host}"] if host is not None else []
    lines += [f"Authorization: Bearer {key}"] if key is not None else []
    if body is not None:
        lines += ["Content-Type: application/json", f"Content-Length: {len(data)}"]
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + data)
        reply = b""
        while chunk := s.recv(65536):
            reply += chunk
    head, _, payload = reply.partition(b"\r\n\r\n")
    status = int(head.split()[1])
    headers = {}
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        headers[name.strip().lower().decode()] = value.strip()
    return status, headers, json.loads(payload)


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1", "127.0.0.1:{port}", "localhost", "LocalHost:{port}", "localhost.",
     "[::1]:{port}", "[::ffff:127.0.0.1]", "good.example", "good.example:8080",
     "corp.example", "api.corp.example:{port}"],
)  # fmt: skip
def test_the_servers_own_names_are_served(served, host):
    status, _, body = _request(served.port, "/v1/models", host.format(port=served.port))
    assert status == 200 and body["object"] == "list", body


@pytest.mark.parametrize(
    "host",
    ["attacker.example", "attacker.example:{port}", "127.0.0.1.attacker.example",
     "localhost.attacker.example", "evilcorp.example", "good.example.attacker.example",
     "127.1", "10.1.2.3", "[::2]:{port}", "a b", "[::1", "127.0.0.1:port", None],
)  # fmt: skip
def test_other_hosts_get_a_400_in_the_endpoints_error_shape(served, host):
    shown = host.format(port=served.port) if host is not None else None
    status, _, body = _request(served.port, "/v1/chat/completions", shown,
                               body={"model": "m", "messages": QUESTION})  # fmt: skip
    assert status == 400, body
    assert body["error"]["type"] == "invalid_request_error"
    assert body["error"]["message"].startswith("Host: ")
    status, _, body = _request(served.port, "/v1/health", shown)  # attnkit's own shape
    assert status == 400 and body["error"].startswith("Host: "), body


def test_the_api_key_is_needed_with_the_openai_client(served):
    base = served.url + "/v1"
    right = openai.OpenAI(base_url=base, api_key=KEY, max_retries=0)
    r = right.chat.completions.create(model="m", messages=QUESTION, max_tokens=2, temperature=0)
    assert r.usage is not None and r.usage.completion_tokens == 2
    wrong = openai.OpenAI(base_url=base, api_key=KEY + "x", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as refused:
        wrong.chat.completions.create(model="m", messages=QUESTION, max_tokens=2)
    assert refused.value.status_code == 401 and refused.value.code == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        wrong.models.list()
    ask = {"model": "m", "messages": QUESTION}
    status, headers, body = _request(served.port, "/v1/chat/completions", "127.0.0.1", key=None,
                                     body=ask)  # fmt: skip
    assert status == 401 and headers["www-authenticate"] == b"Bearer"
    assert body["error"]["message"].startswith("missing API key")
    status, _, body = _request(served.port, "/v1/model", "127.0.0.1", key=None)
    assert status == 401 and body["error"].startswith("missing API key"), body
    for open_path in ("/v1/health",):  # liveness needs no key
        assert _request(served.port, open_path, "127.0.0.1", key=None)[0] == 200
    docs = httpx.get(served.url + "/docs", timeout=30)
    assert docs.status_code == 200


def _stalled_stream(port: int) -> socket.socket:
    """A client with a small receive buffer: asks BIG, reads its first chunk, stops."""
    data = json.dumps(BIG).encode()
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.settimeout(30)
    s.connect(("127.0.0.1", port))
    s.sendall((f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
               f"Authorization: Bearer {KEY}\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(data)}\r\n\r\n").encode() + data)  # fmt: skip
    got = b""
    while b"data: " not in got:
        got += s.recv(1024)
    return s


def _stats(url: str) -> dict[str, Any]:
    stats: dict[str, Any] = httpx.get(url + "/v1/health", timeout=30).json()["batcher"]
    return stats


def _cancelled(stats: dict[str, Any] | str) -> int:
    """Requests cancelled while running or queued, in ``stats`` (or the server's at ``url``)."""
    stats = _stats(stats) if isinstance(stats, str) else stats
    return int(stats["cancelled_running"] + stats["dropped_queued"])


def _drained(s: socket.socket, limit_s: float) -> int:
    """Read what the server sent until it closed or reset the connection; the bytes read."""
    s.settimeout(limit_s)
    total = 0
    try:
        while chunk := s.recv(65536):
            total += len(chunk)
    except ConnectionResetError:
        pass
    return total


def test_clients_that_stop_reading_neither_starve_others_nor_keep_the_worker(served):
    client = openai.OpenAI(base_url=served.url + "/v1", api_key=KEY, max_retries=0)
    client.chat.completions.create(model="m", messages=QUESTION, max_tokens=2)  # warm up
    before = _stats(served.url)
    stalled = [_stalled_stream(served.port) for _ in range(2)]
    try:
        deadline = time.monotonic() + 30
        while _stats(served.url)["batched_requests"] - before["batched_requests"] < 2:
            assert time.monotonic() < deadline, "the large requests never started"
            time.sleep(0.05)
        sent = time.monotonic()
        r = client.chat.completions.create(model="m", messages=QUESTION, max_tokens=2,
                                           temperature=0)  # fmt: skip
        small_s = time.monotonic() - sent
        assert r.usage is not None and r.usage.completion_tokens == 2
        assert small_s < 2.0, f"a 2-token request took {small_s:.2f} s beside stalled streams"
        # Both stalled streams are cancelled (their rows leave the batch) and cut: while a
        # part of their choices runs, or (a fast machine: the first part of 4 choices done
        # before the stall showed) while the next part waits in the queue.
        deadline = time.monotonic() + 30 + 2 * STALL_S
        while _cancelled(served.url) - _cancelled(before) < 2:
            assert time.monotonic() < deadline, ("the stalled streams were never cancelled",
                                                 before, _stats(served.url))  # fmt: skip
            time.sleep(0.1)
        for s in stalled:
            got = _drained(s, limit_s=10 + 2 * STALL_S)
            assert got < 1_000_000, got  # ~2 MB were asked for; a few hundred KB went out
        idle = _stats(served.url)["busy_s"]
        time.sleep(0.5)
        assert _stats(served.url)["busy_s"] == idle  # nothing is generated for them any more
    finally:
        for s in stalled:
            s.close()


def test_shutdown_with_stalled_streams_is_quiet(long_run: Path):
    server = start_server(long_run, "--stall-timeout", "60")
    stalled: list[socket.socket] = []
    try:
        stalled = [_stalled_stream(server.port) for _ in range(2)]
        deadline = time.monotonic() + 30
        while _stats(server.url)["batched_requests"] < 2:
            assert time.monotonic() < deadline, "the large requests never started"
            time.sleep(0.05)
        time.sleep(1.0)  # their buffers fill: the connections' writes pause
        started = time.monotonic()
        server.process.send_signal(signal.SIGINT)  # Ctrl+C
        try:
            output, _ = server.process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            server.process.kill()
            raise
        took = time.monotonic() - started
    finally:
        for s in stalled:
            s.close()
        if server.process.poll() is None:
            stop_server(server)
    assert server.process.returncode == 130, output  # what Ctrl+C exits with
    for noise in ("Task was destroyed", "never retrieved", "Traceback", "ERROR"):
        assert noise not in output, output
    assert output.splitlines() == ["attnkit serve: interrupted"], output  # and nothing else
    # No 3 s graceful wait for them; Python's exit-time collection of torch & co. takes
    # ~4 s of its own on 2 busy cores (an idle server's too).
    assert took < 15.0, f"shutdown took {took:.1f} s"
