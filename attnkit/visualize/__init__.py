"""Pictures: attention heatmaps and training curves (matplotlib, imported lazily)."""

from attnkit.visualize.attention import plot_attention, select_heads
from attnkit.visualize.curves import plot_curves

__all__ = ["plot_attention", "plot_curves", "select_heads"]
