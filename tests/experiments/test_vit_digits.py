"""The ViT-vs-SVC script: a few trainer steps on the real config, the SVC on the same split."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "experiments" / "vit_digits.py"


def load_script():
    spec = importlib.util.spec_from_file_location("vit_digits", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_short_run_reports_vit_and_svc_on_the_same_split(tmp_path):
    pytest.importorskip("sklearn")
    script = load_script()
    out = tmp_path / "r.json"
    result = script.main(
        ["--out", str(tmp_path / "run"), "--json", str(out), "--set", "train.max_steps=5",
         "--set", "train.eval_every=5", "--set", "model.num_layers=1"]
    )  # fmt: skip
    assert result["split"] == {"train": 1438, "held_out": 359}
    assert 0.0 <= result["vit"]["held_out_accuracy"] <= 1.0 and result["vit"]["steps"] == 5
    assert result["svc"]["held_out_accuracy"] > 0.95
    assert json.loads(out.read_text())["cpu"]
    assert (tmp_path / "run" / "checkpoints").is_dir()  # a normal run directory
