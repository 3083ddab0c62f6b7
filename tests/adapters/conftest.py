"""Fixtures of the adapter tests; the tiny models are in tests/adapter_model_helpers.py."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from adapter_model_helpers import OVERRIDES
from torch import nn

from attnkit.models import FAMILIES


@pytest.fixture(params=sorted(OVERRIDES))
def family(request) -> str:
    assert set(OVERRIDES) == set(FAMILIES)  # a new family is tested here too
    return request.param


@pytest.fixture
def randomize_b() -> Callable[[nn.Module], None]:
    """Give every adapter a non-zero ``B`` (a trained adapter), seeded."""

    def run(model: nn.Module) -> None:
        g = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if ".lora_B." in name:
                    p.copy_(torch.randn(p.shape, generator=g) * 0.1)

    return run
