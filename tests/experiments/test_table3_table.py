"""Table 3's builder: means over seeds, the paper beside ours, directions marked."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "experiments" / "table3_table.py"


def _module():
    spec = importlib.util.spec_from_file_location("table3_table", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["table3_table"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _write(path: Path, rows: list[tuple[str, int, float, float]]) -> Path:
    path.write_text("".join(json.dumps({"row": r, "seed": s, "perplexity": p, "bleu": b,
                                        "steps": 100}) + "\n" for r, s, p, b in rows))  # fmt: skip
    return path


def test_rows_are_averaged_and_directions_compared_with_the_paper(tmp_path):
    table3 = _module()
    results = _write(tmp_path / "r.jsonl", [
        ("base", 1, 5.0, 36.0), ("base", 2, 5.2, 36.4),
        ("A_heads1", 1, 6.0, 33.0), ("A_heads1", 2, 6.2, 33.4),  # worse both: as the paper
        ("D_ls0", 1, 4.0, 37.0),  # better PPL (paper too), better BLEU (paper: worse)
        ("E_learned", 1, 5.1, 36.2), ("E_learned", 2, 5.15, 36.3),  # within base's noise
        ("base", 2, 5.2, 36.4),  # a repeated record of a seed counts once
    ])  # fmt: skip
    ours = table3.read_results(results)
    assert ours["base"].ppl == [5.0, 5.2] and abs(ours["base"].mean_bleu - 36.2) < 1e-9
    assert table3.agreement("A_heads1", ours) == ("yes", "yes")
    assert table3.agreement("D_ls0", ours) == ("yes", "no")
    assert table3.agreement("E_learned", ours) == ("yes", "yes")  # flat vs the paper's flat PPL
    text = table3.main([str(results)])
    assert "| A_heads1 | (A) 1 head, d_k = d_model | 5.29 | 24.9 | 6.10 (6.00 / 6.20)" in text
    assert "| C_layers1 |" in text and "not run" in text
    # A_heads1 (yes, yes), D_ls0 (yes, no), E_learned (yes, yes); 19 - 4 rows not run.
    assert text.endswith(
        "Directions as in the paper, of 3 rows compared with the base: perplexity 3, BLEU 2, "
        "both 2; rows not run: 15."
    )


def test_each_row_says_where_it_ran_and_under_which_budget(tmp_path):
    table3 = _module()
    command = ("attnkit train --config configs/multi30k_de_en_cpu.yaml --set data.dir=d "
               "--set train.max_minutes={m} --set train.seed=1 {extra}--out o")  # fmt: skip
    records = [
        {"row": "base", "seed": 1, "cpu": "AMD EPYC", "budget": "15 min"},
        {"row": "base", "seed": 2, "cpu": "AMD EPYC", "command": command.format(m=15, extra="")},
        {"row": "D_ls0", "seed": 1, "cpu": "Intel Xeon",
         "command": command.format(m=240, extra="--set train.max_steps=2154 ")},
        {"row": "D_ls0", "seed": 2, "cpu": "Intel Xeon",
         "command": command.format(m=240, extra="--set train.max_steps=2154 ")},
        {"row": "E_learned", "seed": 1},  # an old record naming neither
    ]  # fmt: skip
    assert [table3.where(r) for r in records] == [
        "AMD EPYC, 15 min", "AMD EPYC, 15 min", "Intel Xeon, 2154 steps",
        "Intel Xeon, 2154 steps", "?",
    ]  # fmt: skip
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps({**r, "perplexity": 5.0, "bleu": 36.0, "steps": 2154})
                            + "\n" for r in records))  # fmt: skip
    text = table3.main([str(path)])
    assert text.splitlines()[0].endswith("| ran on |")
    assert "| yes | AMD EPYC, 15 min |" not in text  # the base row has no marks
    assert "| - | - | AMD EPYC, 15 min |" in text  # two seeds alike: said once
    assert "| Intel Xeon, 2154 steps |" in text and "| ? |" in text


def test_every_row_of_the_script_is_a_valid_config():
    # Each row's --set overrides on the base config, as `attnkit train` reads them: an
    # unknown key or a value the model refuses fails here, not an hour into a sitting.
    import subprocess

    from attnkit.models import TransformerConfig
    from attnkit.training.runconfig import load_run_config

    root = SCRIPT.parents[1]
    script = root / "experiments" / "table3.sh"

    def run(*args: str) -> list[str]:
        done = subprocess.run(["bash", str(script), *args], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return done.stdout.split()

    rows = run("--list")
    assert len(rows) == 19 and set(rows) == set(_module().PAPER)
    for row in rows:
        sets = run("--sets", row)
        config = load_run_config("multi30k_de_en_cpu", sets)
        fields = dict(config.model)
        preset = fields.pop("preset")
        model = TransformerConfig.from_preset(
            preset, **fields, src_vocab_size=8000, tgt_vocab_size=8000
        )
        for key, value in (s.split("=", 1) for s in sets if s.startswith("model.")):
            assert str(getattr(model, key.removeprefix("model."))) == value, row


def test_the_projects_own_results_name_their_rows_machines_and_budgets():
    # experiments/table3_results.jsonl is the table the results history shows: every record a
    # known row and seed, with its CPU and budget (a row from another machine must say so).
    table3 = _module()
    path = SCRIPT.parent / "table3_results.jsonl"
    ours = table3.read_results(path)
    assert "base" in ours and set(ours) <= set(table3.PAPER)
    for line in path.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        assert record["seed"] in (1, 2) and record["steps"] > 0, record["row"]
        cpu, _, budget = table3.where(record).partition(", ")
        assert cpu != "?" and budget.endswith((" min", " steps")), record["row"]


def test_a_missing_or_broken_results_file_is_one_line_naming_it(tmp_path):
    table3 = _module()
    broken = tmp_path / "r.jsonl"
    for text, says in (
        ('{"row": "base", "seed": 1, "perplexity": 6.6, "bleu": 38.0}\n{"row": "base"',
         ":2: not a JSON"),
        ('{"row": "base", "seed": 1, "bleu": 38.0}\n', ":1: a record needs row, seed, perplexity"),
        ('{"row": "base", "seed": 1, "perplexity": "n/a", "bleu": 38.0}\n', ":1: a record needs"),
    ):  # fmt: skip
        broken.write_text(text)
        with pytest.raises(SystemExit) as exit_:
            table3.main([str(broken)])
        assert str(exit_.value).startswith(f"error: {broken}{says}"), exit_.value
    with pytest.raises(SystemExit, match=r"error: .*nothing\.jsonl: No such file"):
        table3.main([str(tmp_path / "nothing.jsonl")])
