"""What the server writes itself (streamed events, its own error bodies) is strict JSON:
a NaN or infinity becomes null with its reason, never a bare ``NaN`` token."""

from __future__ import annotations

import asyncio
import math

from attnkit.jsonio import loads_strict
from attnkit.serve.limits import send_json
from attnkit.serve.openai_api import _sse


def test_a_streamed_event_with_a_nonfinite_value_is_strict_json():
    raw = _sse({"choices": [{"logprob": -math.inf, "delta": {"content": "x"}}]})
    assert raw.startswith(b"data: ") and raw.endswith(b"\n\n")
    event = loads_strict(raw[len(b"data: ") : -2])
    assert event["choices"][0] == {"logprob": None, "delta": {"content": "x"},
                                   "nonfinite": {"logprob": "-Infinity"}}  # fmt: skip


def test_the_servers_own_json_bodies_are_strict():
    sent: list[dict] = []

    async def send(message: dict) -> None:
        sent.append(message)

    asyncio.run(send_json(send, 400, {"error": {"value": math.nan}}, close=True))
    body = loads_strict(b"".join(m.get("body", b"") for m in sent))
    assert body == {"error": {"value": None, "nonfinite": {"value": "NaN"}}}
