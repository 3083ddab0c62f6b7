"""Shared fixtures: tiny random models, deterministic seeds, data paths."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

# Real corpora live beside the checkout (never copied into the repo).
SHARED_DATA = Path(os.environ.get("ATTNKIT_DATA", Path(__file__).parents[2] / "shared" / "data"))


@pytest.fixture(autouse=True)
def _seed_and_one_thread():
    # Test tensors are tiny: intra-op threads only add wake-up latency (on a
    # busy 2-core machine, ~100x per op). Restored after each test.
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    return SHARED_DATA
