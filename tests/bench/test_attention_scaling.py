"""bench/attention_scaling.py: the crossover rule, the report, and one real point."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "attention_scaling.py"


def load():
    spec = importlib.util.spec_from_file_location("attention_scaling", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pt(method, t, ms, mb):
    return {"method": method, "T": t, "ms": ms, "peak_mb": mb}


def test_crossover_needs_every_longer_length_to_be_cheaper():
    m = load()
    lengths = [1, 2, 4]
    points = {
        ("dense", 1): pt("dense", 1, 1.0, 1.0),
        ("dense", 2): pt("dense", 2, 4.0, 2.0),
        ("dense", 4): pt("dense", 4, 16.0, 4.0),
        ("local", 1): pt("local", 1, 0.5, 9.0),
        ("local", 2): pt("local", 2, 5.0, 9.0),
        ("local", 4): pt("local", 4, 8.0, 3.0),
    }
    assert m.crossover(points, "local", "ms", lengths) == 4  # cheaper at 1, not at 2
    assert m.crossover(points, "local", "peak_mb", lengths) == 4
    text = m.report(points, ["dense", "local"], lengths)
    assert "local: time from T=4, memory from T=4" in text
    assert "dense: 2.00 2.00" in text


def test_one_point_in_a_subprocess_reports_time_and_memory():
    m = load()
    args = argparse.Namespace(
        threads=1, heads=2, d_model=32, window=16, reps=1, budget=1.0, causal=True, timeout=120
    )
    point = m.run_point("local", 256, args)
    assert "error" not in point, point
    assert point["ms"] > 0 and point["peak_mb"] >= 0 and point["memory_method"]
