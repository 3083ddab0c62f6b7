"""Swin vs ViT vs SVC: a few trainer steps per model on both bundled image sets."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "experiments" / "image_models.py"


def test_a_short_run_reports_every_model_on_the_same_split(tmp_path, capsys):
    pytest.importorskip("sklearn")
    pytest.importorskip("skimage")
    spec = importlib.util.spec_from_file_location("image_models", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    try:
        result = module.main(
            ["--out", str(tmp_path), "--minutes", "1", "--set", "train.max_steps=3",
             "--set", "train.eval_every=3"]
        )  # fmt: skip
    finally:
        sys.modules.pop("vit_digits", None)
    models = [(row["dataset"], row["model"]) for row in result["rows"]]
    names = ("vit", "swin", "svc")
    expected = [(data, model) for data in ("digits", "lfw_subset") for model in names]
    assert models == expected
    for row in result["rows"]:
        assert 0.0 <= row["mean_accuracy"] <= 1.0
        if row["model"] != "svc":
            assert row["runs"][0]["steps"] == 3
    assert "| lfw_subset | swin |" in capsys.readouterr().out
