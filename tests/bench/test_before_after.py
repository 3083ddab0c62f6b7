"""``bench/before_after.py``: rows read from each benchmark's JSON, ratios the right way up."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import before_after  # noqa: E402  (bench/ is not a package)
import common  # noqa: E402


def test_rows_of_both_benchmarks():
    rows = [{"engine": "attnkit_fp32", "beam": 1, "sentences_per_s": 30.0},
            {"engine": "attnkit_fp32", "beam": 4, "sentences_per_s": 9.0}]  # fmt: skip
    decode = {"results": rows}
    assert before_after.rows_of(decode) == {
        ("attnkit_fp32, greedy", "sent/s"): 30.0, ("attnkit_fp32, beam 4", "sent/s"): 9.0
    }  # fmt: skip
    generate = {"results": [{"engine": "attnkit", "decode_tok_s": 40.0, "prefill_ms": 80.0}]}
    assert before_after.rows_of(generate) == {
        ("attnkit", "decode tok/s"): 40.0, ("attnkit", "prefill ms"): 80.0
    }  # fmt: skip
    with pytest.raises(SystemExit):
        before_after.rows_of({"results": [{"engine": "x"}]})


def test_ratio_above_one_means_the_change_is_faster():
    samples = {
        "before": [{("a", "decode tok/s"): 40.0, ("a", "prefill ms"): 100.0}] * 2,
        "after": [{("a", "decode tok/s"): 44.0, ("a", "prefill ms"): 80.0}] * 2,
    }
    _, records = before_after.compare(samples)
    ratios = {r["metric"]: r["speed_ratio"] for r in records}
    assert ratios == pytest.approx({"decode tok/s": 1.1, "prefill ms": 1.25})


def test_cpu_features_names_every_extension():
    text = common.cpu_features()
    assert text == "flags unknown" or all(f in text for f in common.CPU_FEATURES)
