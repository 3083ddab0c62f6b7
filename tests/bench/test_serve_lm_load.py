"""bench/serve_lm_load.py's helpers: percentiles, ratios, reading a streamed completion."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

lm_load = pytest.importorskip("serve_lm_load")


def test_percentile_and_ratio():
    values = [float(x) for x in range(1, 101)]
    assert lm_load.percentile(values, 0.5) == 51.0
    assert lm_load.percentile(values, 0.99) == 100.0
    assert lm_load.percentile([], 0.5) is None
    assert lm_load.ratio(10.0, 2.5) == 4.0
    assert lm_load.ratio(None, 2.0) is None and lm_load.ratio(1.0, 0.0) is None


def _chunk(text: str, reason: str | None = None) -> str:
    return "data: " + json.dumps({"choices": [{"index": 0, "text": text, "finish_reason": reason}]})


def test_stream_record_times_the_first_text_and_counts_usage():
    record = lm_load.StreamRecord(start=10.0)
    usage = {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 5}}
    lines = [_chunk(""), "", _chunk(" Paris"), _chunk("."), _chunk("", "length"),
             "data: " + json.dumps(usage), "data: [DONE]"]  # fmt: skip
    for k, line in enumerate(lines):
        record.feed(line, 11.0 + k)
    r = record.result()
    assert r == {"ttft": 3.0, "total": 7.0, "tokens": 5, "tokens_from": "usage", "failure": None}


def test_stream_record_failures_and_chunk_counting():
    cut = lm_load.StreamRecord(start=0.0)
    cut.feed(_chunk("a"), 1.0)
    assert cut.result()["failure"] == "stream ended without [DONE]"
    assert cut.result()["tokens"] == 1 and cut.result()["tokens_from"] == "chunks"
    err = lm_load.StreamRecord(start=0.0)
    err.feed('data: {"error": {"message": "timeout"}}', 1.0)
    err.feed("data: [DONE]", 2.0)
    assert err.result()["failure"].startswith("error event")
