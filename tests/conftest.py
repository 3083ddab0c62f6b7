"""Shared fixtures: tiny random models, deterministic seeds, data paths."""

from __future__ import annotations

import contextlib
import io
import os
from dataclasses import dataclass
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


@dataclass(frozen=True)
class QuickstartRun:
    out: Path  # the quickstart's --out directory (a checkpoint `load_model` reads)
    stdout: str


@pytest.fixture(scope="session")
def quickstart_run(tmp_path_factory) -> QuickstartRun:
    """One quickstart on a reduced budget, shared by the tests that need a
    trained quickstart-size model (tests/cli/test_quickstart.py, tests/quantize).
    300 steps end it (about a minute on 2 quiet cores); 4 minutes is a ceiling."""
    from attnkit.cli.main import main

    out = tmp_path_factory.mktemp("quickstart") / "qs"
    captured = io.StringIO()
    with contextlib.redirect_stdout(captured):
        code = main(["quickstart", "--out", str(out), "--minutes", "4", "--max-steps", "300",
                     "--test-size", "100", "--no-progress"])  # fmt: skip
    assert code == 0
    return QuickstartRun(out, captured.getvalue())
