"""The ViT digits script: shifts move pixels as claimed; a 1-epoch run reports its results."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[2] / "experiments" / "vit_digits.py"


def load_script():
    spec = importlib.util.spec_from_file_location("vit_digits", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_random_shift_moves_whole_images_with_zero_fill():
    script = load_script()
    images = torch.arange(2 * 16, dtype=torch.float32).view(2, 1, 4, 4) + 1
    shifted = script.random_shift(images, 1, torch.Generator().manual_seed(0))
    for b in range(2):
        padded = torch.nn.functional.pad(images[b, 0], (1, 1, 1, 1))
        crops = [padded[dy : dy + 4, dx : dx + 4] for dy in range(3) for dx in range(3)]
        assert any(torch.equal(shifted[b, 0], c) for c in crops)


def test_one_epoch_run_reports_vit_and_svc(tmp_path):
    pytest.importorskip("sklearn")
    script = load_script()
    out = tmp_path / "r.json"
    result = script.main(
        ["--epochs", "1", "--eval-every", "0", "--layers", "1", "--json", str(out)]
    )
    assert 0.0 <= result["vit"]["held_out_accuracy"] <= 1.0
    assert result["svc"]["held_out_accuracy"] > 0.95
    assert out.exists()
