"""Choosing the device a command or a trainer runs on."""

from __future__ import annotations

import torch


def resolve_device(name: str | torch.device | None = None) -> torch.device:
    """``None``/``"auto"``: CUDA when available, else the CPU; otherwise ``torch.device(name)``."""
    if isinstance(name, torch.device):
        return name
    if name in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)
