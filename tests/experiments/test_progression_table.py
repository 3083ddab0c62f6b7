"""experiments/progression_table.py: rows, steps from the logs, and Table 3's verdicts."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).parents[2] / "experiments" / "progression_table.py"


def _module():
    spec = importlib.util.spec_from_file_location("progression_table", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _record(row: str, search: str, bleu_lc: float) -> dict:
    return {"row": row, "search": search, "bleu": bleu_lc - 0.2, "bleu_lc": bleu_lc,
            "chrf": 50.0, "perplexity": 7.5, "train_seconds": 420, "commit": "abc1234",
            "device": "cpu", "date": "2026-11-23", "command": f"attnkit train {row}"}  # fmt: skip


def test_tables_read_steps_and_compare_each_row_with_its_reference(tmp_path, capsys):
    records = [
        _record("transformer_sinusoidal", "greedy", 20.0),
        _record("transformer_sinusoidal", "beam", 21.0),
        _record("heads1", "beam", 19.5),  # lower, as in the paper
        _record("heads8", "beam", 20.0),  # lower, unlike the paper
        _record("bahdanau", "greedy", 12.0),
    ]
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    (tmp_path / "transformer_sinusoidal.train.log").write_text(
        "29000 training pairs, vocabulary 8000, 7.6M parameters, device cpu\n"
        '{"out": "x", "step": 455, "stopped_early": true}\n',
        encoding="utf-8",
    )
    _module().main(str(path))
    out = capsys.readouterr().out
    base = next(line for line in out.splitlines() if line.startswith("| transformer_sinusoidal |"))
    assert "| 7.6M | 455 | 420 | 20.0 | 21.0 | 20.8 |" in base
    assert "| bahdanau | ? | ? | 420 | 12.0 | - |" in out  # no log, no beam record
    heads1 = next(line for line in out.splitlines() if line.startswith("| heads1 |"))
    heads8 = next(line for line in out.splitlines() if line.startswith("| heads8 |"))
    assert "-1.5 vs transformer_sinusoidal" in heads1 and heads1.endswith("| yes |")
    assert "-1.0 vs transformer_sinusoidal" in heads8 and heads8.endswith("| no |")
    assert "`attnkit train heads1`, commit abc1234" in out
