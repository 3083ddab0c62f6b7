"""The AESLC recipes: each loads, says in its first line which --init it takes, and
``configs/aeslc.yaml`` is one of them."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnkit.training.runconfig import load_run_config

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
INITS = {"transformer": "none", "smollm2": "SmolLM2", "bert2bert": "MiniLM"}


@pytest.mark.parametrize("name", sorted(INITS))
def test_recipe_loads_and_names_its_init(name):
    path = CONFIGS / f"aeslc_{name}.yaml"
    first = path.read_text(encoding="utf-8").splitlines()[0]
    assert first.startswith("# --init: ") and INITS[name] in first
    run = load_run_config(path, ["data.dir=elsewhere"])
    assert run.task == "summarization" and run.train.max_minutes == 30
    assert run.data.train == "train.jsonl" and run.data.valid == "validation.jsonl"


def test_the_shipped_recipe_is_one_of_the_three():
    shipped = (CONFIGS / "aeslc.yaml").read_text(encoding="utf-8")
    assert shipped in [(CONFIGS / f"aeslc_{n}.yaml").read_text(encoding="utf-8") for n in INITS]
