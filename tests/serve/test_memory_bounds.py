"""Bounded memory: a real server's RSS under requests of varied shapes.

Every request below has a new mix of texts, lengths and beams, so nearly
every one brings oneDNN new (rows, in, out) shapes. With oneDNN's and ideep's
default caches (1024 primitives each) the server's RSS climbs with them; with
``attnkit serve``'s bound it levels off after the first requests.
"""

from __future__ import annotations

import random
from typing import Any

import httpx
import psutil

from attnkit.data.synthetic import number_to_english
from attnkit.serve.memory_bounds import NATIVE_CACHE_VARIABLES, bound_native_caches


def _varied(rng: random.Random) -> dict[str, Any]:
    beam = rng.randint(1, 16)
    texts = [number_to_english(rng.randint(1, 10 ** rng.randint(1, 6)))
             for _ in range(rng.choice([1, 2, 3, 5, 8, 13, 24]))]  # fmt: skip
    return {"text": texts, "beam": beam, "nbest": rng.randint(1, min(beam, 3))}


def test_varied_requests_keep_the_server_rss_bounded(checkpoint, fresh_server, monkeypatch):
    for name in NATIVE_CACHE_VARIABLES:  # the server's own default, whatever CI exports
        monkeypatch.delenv(name, raising=False)
    served = fresh_server(checkpoint("transformer"))  # --precision fp32: oneDNN-packed
    process = psutil.Process(served.process.pid)
    rng = random.Random(0)
    rss = []
    with httpx.Client(base_url=served.url, timeout=120) as http:
        for n in range(1, 241):
            r = http.post("/v1/translate", json=_varied(rng))
            assert r.status_code == 200, r.text
            if n in (60, 240):
                rss.append(process.memory_info().rss / 2**20)
    first, last = rss
    assert last <= 1.3 * first, f"RSS {first:.0f} MB after 60 requests, {last:.0f} MB after 240"


def test_the_bound_keeps_what_the_environment_says(monkeypatch):
    monkeypatch.setenv(NATIVE_CACHE_VARIABLES[0], "7")
    monkeypatch.delenv(NATIVE_CACHE_VARIABLES[1], raising=False)
    held = bound_native_caches(64)
    assert held == {NATIVE_CACHE_VARIABLES[0]: "7", NATIVE_CACHE_VARIABLES[1]: "64"}
