"""The server's budgets and cancellation, in process: token budget, time budget, a
client that disconnects mid-request, and sampling options that never give a 500."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from attnkit.checkpoints.loading import load_model
from attnkit.serve.app import ServeSettings, create_app
from attnkit.serve.model_host import ModelHost


@pytest.fixture(scope="module")
def lm(checkpoint: Callable[[str], Path]) -> Iterator[Callable[..., TestClient]]:
    """``lm(**settings)``: a TestClient over the tiny decoder-only LM with those settings."""
    engine = ModelHost(load_model(checkpoint("decoder_only")))
    opened: list[TestClient] = []

    def get(**settings: Any) -> TestClient:
        client = TestClient(create_app(engine, ServeSettings(threads=1, **settings)))
        opened.append(client.__enter__())
        return client

    yield get
    for c in opened:
        c.__exit__(None, None, None)


def test_max_new_tokens_over_the_servers_budget_is_a_422_naming_the_option(lm):
    c = lm(max_new_tokens=8)
    assert c.get("/v1/model").json()["limits"]["max_new_tokens"] == 8
    ok = c.post("/v1/generate", json={"prompt": "the cat", "max_new_tokens": 8})
    assert ok.status_code == 200 and ok.json()["new_tokens"] == 8
    for path in ("/v1/generate", "/v1/explore"):
        body = {"prompt": "the cat"} if path == "/v1/generate" else {"text": ["the cat"]}
        r = c.post(path, json={**body, "max_new_tokens": 9})
        assert r.status_code == 422
        assert r.json() == {
            "error": "max_new_tokens: 9 is over this server's limit of 8 (--max-new-tokens)"
        }


def test_a_request_past_the_time_budget_is_cancelled_with_a_503(lm):
    c = lm(request_timeout=0.3)
    start = time.monotonic()
    r = c.post("/v1/generate", json={"prompt": "the cat", "max_new_tokens": 1024})
    took = time.monotonic() - start
    full = time.monotonic()
    c.post("/v1/generate", json={"prompt": "the cat", "max_new_tokens": 40})  # still serving
    assert r.status_code == 503, r.text
    assert r.json()["error"].endswith("time budget of 0.3 s (--request-timeout)")
    assert took < 0.3 + 5.0, took  # stopped at a step boundary, not after 1024 tokens
    assert time.monotonic() - full < 30
    health = c.get("/v1/health").json()["batcher"]
    assert health["cancelled_running"] + health["dropped_queued"] >= 1


@pytest.mark.parametrize(
    "options",
    [
        {"temperature": 1e-300},
        {"temperature": 5e-324},
        {"temperature": 100.0},
        {"top_p": 1e-300},
        {"top_p": 5e-324, "temperature": 1e-300},
        {"top_k": 10**30},
        {"top_k": 1, "top_p": 1.0, "temperature": 1e-30},
        {"seed": 2**63 - 1},
    ],
    ids=lambda o: ",".join(f"{k}={v:g}" for k, v in o.items()),
)
def test_sampling_options_inside_the_accepted_range_never_give_a_500(lm, options):
    c = lm()
    r = c.post("/v1/generate", json={"prompt": "the cat", "max_new_tokens": 5, **options})
    assert r.status_code == 200, r.text
    assert r.json()["new_tokens"] == 5


@pytest.mark.parametrize(
    "raw",
    [
        '"temperature": -1e-300',
        '"temperature": 100.0001',
        '"temperature": 1e400',
        '"temperature": NaN',
        '"temperature": Infinity',
        '"top_p": 0',
        '"top_p": -0.0',
        '"top_p": 1.0000001',
        '"top_p": 1e-400',
        '"top_k": -1',
        '"top_k": 1.5',
        '"seed": 9223372036854775808',
        '"seed": -1',
        '"max_new_tokens": -1',
        '"max_new_tokens": 1e3',
    ],
)
def test_sampling_options_out_of_range_are_a_4xx_naming_the_field(lm, raw):
    c = lm()
    body = '{"prompt": "the cat", ' + raw + "}"
    r = c.post("/v1/generate", content=body, headers={"content-type": "application/json"})
    field = raw.split('"')[1]
    assert 400 <= r.status_code < 500, (r.status_code, r.text)
    assert r.json()["error"].startswith(field), r.text


def test_a_client_that_disconnects_mid_generation_stops_it(lm, spy):
    """Raw ASGI: the body, then ``http.disconnect`` once decoding has begun (what uvicorn
    sends when the socket closes). The handler answers at once; decoding stops."""
    c = lm()
    app = c.app
    stepper = spy(app.app.state.engine)  # type: ignore[attr-defined]
    body = json.dumps({"prompt": "the cat", "max_new_tokens": 1024}).encode()
    scope = {"type": "http", "method": "POST", "path": "/v1/generate", "raw_path": b"/v1/generate",
             "query_string": b"", "headers": [(b"content-type", b"application/json"),
                                              (b"content-length", str(len(body)).encode())],
             "http_version": "1.1", "scheme": "http", "server": ("t", 80), "client": ("c", 1),
             "root_path": "", "state": {}}  # fmt: skip
    sent: list[dict[str, Any]] = []
    steps_at_disconnect = []

    async def go() -> None:
        messages = iter([{"type": "http.request", "body": body, "more_body": False}])

        async def receive() -> dict[str, Any]:
            message = next(messages, None)
            if message is not None:
                return message
            while stepper.steps < 3:  # decoding has begun
                await asyncio.sleep(0.001)
            steps_at_disconnect.append(stepper.steps)
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await app(scope, receive, send)

    c.portal.call(go)  # type: ignore[union-attr]
    assert sent[0]["status"] == 499, sent
    assert json.loads(sent[1]["body"]) == {"error": "the client disconnected"}
    deadline = time.monotonic() + 10
    while c.get("/v1/health").json()["batcher"]["cancelled_running"] < 1:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert stepper.steps < 1024, (steps_at_disconnect, stepper.steps)
