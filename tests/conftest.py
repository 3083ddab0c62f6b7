"""Shared fixtures: tiny random models, deterministic seeds, data paths."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

# Real corpora live beside the checkout (never copied into the repo).
SHARED_DATA = Path(os.environ.get("ATTNKIT_DATA", Path(__file__).parents[2] / "shared" / "data"))


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    return SHARED_DATA
