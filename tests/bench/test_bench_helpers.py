"""The benchmark scripts' shared helpers (bench/ is not a package: put it on the path)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

common = pytest.importorskip("common")
train_throughput = pytest.importorskip("train_throughput")


def test_count_flops_counts_a_matmul():
    a, b = torch.randn(3, 4), torch.randn(4, 5)
    assert common.count_flops(lambda: a @ b) == 2 * 3 * 4 * 5


def test_round_robin_times_every_step_every_round():
    calls = []
    steps = {"x": lambda: calls.append("x"), "y": lambda: calls.append("y")}
    times = common.round_robin(steps, 3, torch.device("cpu"))
    assert calls == ["x", "y"] * 3
    assert {k: len(v) for k, v in times.items()} == {"x": 3, "y": 3}


def test_model_names_and_features():
    parse = train_throughput.parse_model
    assert parse("attnkit_fast", ("compile", "fused")) == (
        "attnkit",
        frozenset({"compile", "fused"}),
    )
    assert parse("attnkit+chunked", ()) == ("attnkit", frozenset({"chunked"}))
    assert parse("hf", ()) == ("hf", frozenset())
    for bad in ("hf+compile", "attnkit+turbo", "marian"):
        with pytest.raises(SystemExit):
            parse(bad, ())
