"""bench/serve_lm_load.py's client side: the prompts, one streamed completion read as
server-sent events (``StreamRecord``, ``one_request``), a level of clients in a closed
loop (``run_level``), a level's row (``summarize``, ``percentile``, ``ratio``) and the
streaming check at concurrency 1 (``streaming_check``).

Kept beside ``serve_lm_load.py``, which imports it (and re-exports these names).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from typing import Any

PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a small village,",
    "The three primary colors are",
    "Water boils at a temperature of",
    "My favourite recipe for pancakes starts with",
    "The best way to learn a new language is",
    "In the year 1969, astronauts",
    "A good night's sleep helps you",
    "The largest planet in the solar system is",
    "To write a function in Python, you",
    "The main ingredients of bread are",
    "On a rainy afternoon, the children",
    "The theory of evolution explains",
    "Photosynthesis is the process by which",
    "The quickest route from the station to the museum",
    "Dear hiring manager, I am writing to",
    "The history of the printing press begins",
    "Three tips for staying focused at work:",
    "The ocean covers most of the Earth and",
    "A healthy breakfast usually includes",
    "The first rule of good writing is",
    "When the train finally arrived,",
    "Mount Everest is the highest mountain because",
    "The difference between a virus and a bacterium is",
    "Here is a short poem about autumn:",
    "The stock market rose today after",
    "In chess, the opening move",
    "Bees are important to farmers because",
    "The old lighthouse keeper looked out at",
    "A computer's memory stores",
    "The recipe calls for two cups of flour and",
    "Summer holidays by the sea are",
]


def percentile(values: list[float], q: float) -> float | None:
    """The ``q`` quantile (0..1) of ``values``, nearest rank (as serve_load's); None if empty."""
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a is not None and b else None


class StreamRecord:
    """One streamed completion read line by line: ``feed(line, now)`` per SSE line."""

    def __init__(self, start: float) -> None:
        self.start = start
        self.first_text: float | None = None  # when the first chunk with text came
        self.first_chunk: float | None = None
        self.end: float | None = None
        self.text_chunks = 0
        self.usage_tokens: int | None = None
        self.done = False
        self.error: str | None = None

    def feed(self, line: str, now: float) -> None:
        if not line.startswith("data:"):
            return
        data = line[5:].strip()
        if data == "[DONE]":
            self.done, self.end = True, now
            return
        try:
            event = json.loads(data)
        except ValueError:
            self.error = self.error or f"bad event: {data[:100]}"
            return
        if "error" in event:
            self.error = self.error or f"error event: {json.dumps(event['error'])[:200]}"
        if self.first_chunk is None:
            self.first_chunk = now
        if any(c.get("text") or (c.get("delta") or {}).get("content")
               for c in event.get("choices") or ()):  # fmt: skip
            self.text_chunks += 1
            if self.first_text is None:
                self.first_text = now
        if event.get("usage"):
            self.usage_tokens = int(event["usage"]["completion_tokens"])

    def result(self) -> dict[str, Any]:
        """TTFT, total, tokens; ``failure`` set when the stream was not whole."""
        failure = self.error
        if failure is None and not self.done:
            failure = "stream ended without [DONE]"
        first = self.first_text if self.first_text is not None else self.first_chunk
        end = self.end if self.end is not None else first
        tokens = self.usage_tokens if self.usage_tokens is not None else self.text_chunks
        return {
            "ttft": None if first is None else first - self.start,
            "total": None if end is None else end - self.start,
            "tokens": tokens,
            "tokens_from": "usage" if self.usage_tokens is not None else "chunks",
            "failure": failure,
        }


def body(model: str, prompt: str, max_tokens: int) -> dict[str, Any]:
    return {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}}  # fmt: skip


async def one_request(http: Any, model: str, prompt: str, max_tokens: int) -> dict[str, Any]:
    import httpx

    record = StreamRecord(time.perf_counter())
    try:
        async with http.stream(
            "POST", "/v1/completions", json=body(model, prompt, max_tokens)
        ) as r:
            if r.status_code != 200:
                text = (await r.aread()).decode("utf-8", "replace")
                failure = f"{r.status_code}: {text[:200]}"
                return {"ttft": None, "total": time.perf_counter() - record.start, "tokens": 0,
                        "tokens_from": None, "failure": failure}  # fmt: skip
            async for line in r.aiter_lines():
                record.feed(line, time.perf_counter())
    except httpx.HTTPError as e:
        record.error = record.error or f"{type(e).__name__}: {e}"
    return record.result()


async def run_level(url: str, model: str, concurrency: int, duration: float, max_tokens: int,
                    max_requests: int) -> dict[str, Any]:  # fmt: skip
    """``concurrency`` clients in a closed loop for ``duration`` s; every request's record."""
    import httpx

    results: list[dict[str, Any]] = []
    stop_at = time.monotonic() + duration

    async def client(n: int) -> None:
        # One connection per simulated user, as serve_load's clients.
        i = n
        async with httpx.AsyncClient(base_url=url, timeout=300) as http:
            while time.monotonic() < stop_at and len(results) < max_requests:
                prompt = PROMPTS[i % len(PROMPTS)]
                i += concurrency
                results.append(await one_request(http, model, prompt, max_tokens))

    begin = time.monotonic()
    await asyncio.gather(*(client(n) for n in range(concurrency)))
    return {"results": results, "elapsed": time.monotonic() - begin}


def summarize(concurrency: int, parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One row from a level's rounds: tokens of the finished requests over the total time."""
    results = [r for p in parts for r in p["results"]]
    ok = [r for r in results if r["failure"] is None]
    failures = [r["failure"] for r in results if r["failure"] is not None]
    elapsed = sum(p["elapsed"] for p in parts)
    tokens = sum(r["tokens"] for r in ok)
    ttft = [r["ttft"] for r in ok if r["ttft"] is not None]
    total = [r["total"] for r in ok if r["total"] is not None]

    def ms(x: float | None) -> float | None:
        return None if x is None else round(1000 * x, 1)

    return {
        "concurrency": concurrency,
        "requests": len(results),
        "failed": len(failures),
        "first_failure": failures[0] if failures else None,
        "seconds": round(elapsed, 2),
        "completion_tokens": tokens,
        "tokens_per_request": round(tokens / len(ok), 1) if ok else None,
        "tokens_from": sorted({r["tokens_from"] for r in ok}),
        "tokens_per_s": round(tokens / elapsed, 2) if elapsed else None,
        "per_round_tokens_per_s": [
            round(sum(r["tokens"] for r in p["results"] if r["failure"] is None) / p["elapsed"], 2)
            for p in parts
        ],
        "ttft_p50_ms": ms(percentile(ttft, 0.50)),
        "ttft_p99_ms": ms(percentile(ttft, 0.99)),
        "total_p50_ms": ms(percentile(total, 0.50)),
        "total_p99_ms": ms(percentile(total, 0.99)),
    }


async def streaming_check(url: str, model: str, max_tokens: int, repeats: int) -> dict[str, Any]:
    """Concurrency 1, no load: prefill (+ first step), one decode step, TTFT of long answers."""
    import httpx

    async with httpx.AsyncClient(base_url=url, timeout=300) as http:
        short, long = [], []
        for k in range(repeats):  # the same prompts for both, so the prefill is the same
            prompt = PROMPTS[k % len(PROMPTS)]
            short.append(await one_request(http, model, prompt, 1))
            long.append(await one_request(http, model, prompt, max_tokens))
    failures = [r["failure"] for r in short + long if r["failure"]]
    prefill = statistics.median([r["ttft"] for r in short if r["ttft"] is not None] or [0.0])
    good = [r for r in long if not r["failure"] and r["ttft"] is not None]
    steps = [(r["total"] - r["ttft"]) / (r["tokens"] - 1) for r in good if r["tokens"] > 1]
    step = statistics.median(steps) if steps else None
    ttfts = [r["ttft"] for r in good]
    ttft = statistics.median(ttfts) if ttfts else None
    bound = prefill + step if step is not None else None
    return {
        "repeats": repeats,
        "failed": len(failures),
        "first_failure": failures[0] if failures else None,
        "prefill_ms": round(1000 * prefill, 1),  # TTFT of max_tokens 1: prefill + first step
        "decode_step_ms": None if step is None else round(1000 * step, 2),
        "ttft_ms": None if ttft is None else round(1000 * ttft, 1),
        "total_ms": round(1000 * statistics.median([r["total"] for r in good]), 1)
        if good
        else None,
        "tokens_per_request": statistics.median([r["tokens"] for r in long]),
        "ttft_over_prefill_plus_step": ratio(ttft, bound),
    }
