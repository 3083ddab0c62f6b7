"""Hardening scenarios for ``bench/serve_load.py``: abandoned requests, SIGTERM, a varied soak.

* ``abandon``: clients send large requests over raw sockets and close them
  ``--abandon-after`` seconds later (as a user who gives up); then one small
  request is timed. A server that decodes abandoned work makes it wait for all
  of it.
* ``sigterm``: large requests in flight (clients still waiting), then SIGTERM;
  the time until the process has exited.
* ``soak_varied``: requests of varied beams, batch sizes, lengths, n-best and
  length penalties, at a fixed concurrency; the server's RSS every
  ``every`` requests.

Every scenario takes a running server (``url``, ``pid``); ``serve_load.py``
starts and stops it.
"""

from __future__ import annotations

import asyncio
import json
import random
import socket
import time
from collections.abc import Callable
from typing import Any

BEAMS = list(range(1, 17))
BATCH_SIZES = [1, 1, 1, 1, 2, 2, 3, 4, 4, 6, 8, 8, 12, 16, 24, 32, 64]  # texts per request


def raw_post(port: int, path: str, body: dict[str, Any]) -> socket.socket:
    """Send one POST over a fresh socket and return the socket, without reading."""
    data = json.dumps(body).encode()
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n").encode()  # fmt: skip
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(head + data)
    return sock


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def abandon(
    url: str, path: str, body: dict[str, Any], n: int, after: float, small: dict[str, Any]
) -> dict[str, Any]:
    """``n`` requests of ``body`` abandoned ``after`` s after sending; then time ``small``."""
    import httpx

    sockets = [raw_post(_port(url), path, body) for _ in range(n)]
    time.sleep(after)
    for s in sockets:
        s.close()
    start = time.perf_counter()
    r = httpx.post(url + path, json=small, timeout=600)
    latency = time.perf_counter() - start
    health = httpx.get(url + "/v1/health", timeout=30).json()
    return {
        "abandoned": n,
        "abandoned_after_s": after,
        "small_status": r.status_code,
        "small_latency_s": round(latency, 3),
        "dropped_queued": health["batcher"].get("dropped_queued"),
        "cancelled_running": health["batcher"].get("cancelled_running"),
    }


def sigterm(proc: Any, url: str, path: str, body: dict[str, Any], n: int) -> dict[str, Any]:
    """``n`` requests of ``body`` in flight (clients waiting), then SIGTERM: seconds to exit."""
    sockets = [raw_post(_port(url), path, body) for _ in range(n)]
    time.sleep(1.0)  # the worker is busy with the first one
    start = time.perf_counter()
    proc.terminate()
    proc.wait(120)
    took = time.perf_counter() - start
    answers = []
    for s in sockets:
        s.settimeout(5)
        try:
            answers.append(s.recv(200).split(b"\r\n", 1)[0].decode("latin-1"))
        except OSError as e:
            answers.append(type(e).__name__)
        s.close()
    return {"in_flight": n, "exit_s": round(took, 3), "returncode": proc.returncode,
            "answers": sorted(set(answers))}  # fmt: skip


def varied_request(rng: random.Random, words: Callable[[int], str]) -> dict[str, Any]:
    """One translate body of varied shape: 1-64 texts of 1-6-digit numbers, beam 1-16."""
    beam = rng.choice(BEAMS)
    texts = [words(rng.randint(1, 10 ** rng.randint(1, 6))) for _ in range(rng.choice(BATCH_SIZES))]
    return {"text": texts, "beam": beam, "nbest": rng.randint(1, min(beam, 4)),
            "alpha": rng.choice([0.0, 0.6, 1.0])}  # fmt: skip


async def soak_varied(
    url: str,
    rss: Callable[[], float],
    words: Callable[[int], str],
    *,
    requests: int,
    concurrency: int,
    every: int,
    seed: int = 0,
) -> dict[str, Any]:
    """``requests`` varied translate requests from ``concurrency`` clients; RSS every ``every``."""
    import httpx

    rng = random.Random(seed)
    bodies = [varied_request(rng, words) for _ in range(requests)]
    done, failed, samples = 0, 0, [(0, round(rss(), 1))]
    begin = time.monotonic()
    queue = iter(bodies)

    async def client() -> None:
        nonlocal done, failed
        async with httpx.AsyncClient(base_url=url, timeout=600) as http:
            for body in queue:
                r = await http.post("/v1/translate", json=body)
                failed += r.status_code != 200
                done += 1
                if done % every == 0:
                    samples.append((done, round(rss(), 1)))

    await asyncio.gather(*(client() for _ in range(concurrency)))
    by_count = dict(samples)
    first = by_count.get(every) or samples[1][1]
    return {
        "requests": done,
        "failed": failed,
        "seconds": round(time.monotonic() - begin, 1),
        "texts": sum(len(b["text"]) for b in bodies),
        "rss_mb": samples,
        "rss_after_first_mb": first,
        "rss_end_mb": samples[-1][1],
        "rss_ratio_end_to_first": round(samples[-1][1] / first, 3),
        "rss_max_mb": max(r for _, r in samples),
    }
