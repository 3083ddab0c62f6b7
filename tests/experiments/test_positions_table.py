"""experiments/positions_table.py: one row per scheme, the latest record wins, refusals as n/a."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).parents[2] / "experiments" / "positions_table.py"


def _module():
    spec = importlib.util.spec_from_file_location("positions_table", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _record(row: str, context: int, loss: float | None, error: str | None = None) -> dict:
    scores = {} if loss is None else {"loss": loss, "perplexity": 2.718281828**loss}
    return {"row": row, "context": context, **scores, "error": error, "train_seconds": 100,
            "commit": "abc1234", "device": "cpu", "date": "2026-11-23"}  # fmt: skip


def test_table_orders_rows_and_marks_refusals(tmp_path, capsys):
    refusal = "attnkit evaluate: error: --context 128: this model's learned position table ..."
    records = [
        _record("alibi", 64, 1.50),
        _record("alibi", 128, 1.45),
        _record("learned", 64, 1.52),
        _record("learned", 128, None, refusal),
        _record("sinusoidal", 64, 1.60),
        _record("sinusoidal", 128, 2.90),
        _record("sinusoidal", 64, 1.55),  # a re-run replaces the first record
    ]
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert _module().main([str(path)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "| positions | 64 (trained) | 128 | train s |"
    assert [line.split("|")[1].strip() for line in lines[2:5]] == ["sinusoidal", "learned", "alibi"]
    assert "| sinusoidal | 1.550 (4.71) | 2.900 (18.17) | 100 |" in out
    assert "| learned | 1.520 (4.57) | n/a | 100 |" in out
    assert f"- learned: {refusal}" in out and "commit abc1234" in out
