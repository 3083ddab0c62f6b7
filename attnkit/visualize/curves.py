"""Training curves from ``metrics.jsonl`` records."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from attnkit.visualize.figures import pyplot, save_figure


def plot_curves(records: Sequence[dict[str, object]], path: str | Path) -> Path:
    """Plot training loss (and validation loss, when present) against step."""
    train = [(r["step"], r["loss"]) for r in records if r.get("split") == "train"]
    valid = [(r["step"], r["loss"]) for r in records if r.get("split") == "valid"]
    fig, ax = pyplot().subplots(figsize=(6, 4))
    if train:
        ax.plot(*zip(*train), label="train loss", linewidth=1)
    if valid:
        ax.plot(*zip(*valid), marker="o", label="valid loss")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (label-smoothed, per token)")
    ax.grid(alpha=0.3)
    ax.legend()
    return save_figure(fig, path)
