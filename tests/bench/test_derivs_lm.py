"""bench/derivs_lm.py: both rows of the MoE comparison run end to end on a tiny text."""

from __future__ import annotations

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_moe_rows_report_loss_speed_parameters_and_utilisation(tmp_path, capsys):
    sys.path.insert(0, str(BENCH))
    try:
        import derivs_lm
    finally:
        sys.path.remove(str(BENCH))
    (tmp_path / "input.txt").write_text("to be or not to be, that is the question. " * 300)
    tiny = ["model.d_model=32", "model.num_heads=2", "model.num_layers=1", "model.max_len=32",
            "train.max_tokens=256", "train.eval_blocks=4", "train.max_steps=3",
            "train.log_every=1", "train.warmup_steps=1"]  # fmt: skip
    argv = ["moe", "--data", str(tmp_path), "--minutes", "5", "--out", str(tmp_path / "out"),
            "--speed", "1"]  # fmt: skip
    result = derivs_lm.main([*argv, *[x for item in tiny for x in ("--set", item)]])
    dense, moe = result["rows"].values()
    assert dense["steps"] == moe["steps"] == 3
    assert "utilisation_mean" not in dense and len(moe["utilisation_mean"]) == 4
    assert abs(sum(moe["utilisation_mean"]) - 1.0) < 1e-6
    # Same active parameters per token but for the router's 4 x 32 weights and the second
    # active expert's output bias (32); about twice the FFN parameters in all.
    assert moe["active_parameters"] - dense["active_parameters"] == 32 * 4 + 32
    assert moe["parameters"] > dense["parameters"]
    assert set(result["speed"]) == set(result["rows"])
    assert all(v["tokens_per_s"] > 0 for v in result["speed"].values())
    assert "| moe (4 x d_ff 256, top-2)" in capsys.readouterr().out
