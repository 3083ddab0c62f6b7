"""Where a Swin Transformer looks: one block's window attention, its windows drawn on the image.

A Swin block attends only inside its (possibly shifted) windows, so its map is
a set of small ones. ``window_attention`` reads block ``layer`` (counted over
all stages) for one image and returns, for every token of that block's grid,
the attention it receives averaged over the queries of its window (one head or
the mean of heads), back in image order (the cyclic shift undone), with the
window each token belongs to. ``plot_window_attention`` draws the image, the
grid of weights with the window borders (shifted blocks: the borders move by
``M // 2``; a window cut by the image edge is the cyclic wrap the paper masks
within it), and the weights over the image.

Shapes: ``C`` channels, ``H``/``W`` image size, ``g`` tokens per side of the block's grid.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from attnkit.attention.windows import window_merge
from attnkit.models.swin import SwinTransformer
from attnkit.visualize.image_attention import plot_grid_over_image


@dataclass
class WindowAttentionMap:
    """One block's attention for one image.

    Attributes:
        grid: ``(g, g)`` attention each token receives (mean over its window's queries).
        window: ``(g, g)`` long, the window (in the rolled grid) each token belongs to.
        window_size: M; shift: the block's cyclic shift; stage: the block's stage.
        probs: ``(K,)`` the model's class probabilities for the image.
    """

    grid: Tensor
    window: Tensor
    window_size: int
    shift: int
    stage: int
    probs: Tensor


@torch.no_grad()
def window_attention(
    model: SwinTransformer, image: Tensor, *, layer: int = -1, head: int | None = None
) -> WindowAttentionMap:
    """Block ``layer``'s window attention (``head`` or the mean of heads) for ``image``."""
    model.eval()
    device = next(model.parameters()).device
    out = model(image[None].to(device), need_weights=True)
    assert out.attentions is not None
    stage, block = model.blocks()[layer]
    weights = out.attentions[layer][0].float().cpu()  # (nW, h, n, n)
    weights = weights.mean(1) if head is None else weights[:, head]  # (nW, n, n)
    received = weights.mean(1)  # (nW, n): mean over each window's queries
    m, g, shift = block.attn.window, model.config.stage_grid(stage), block.shift
    grid = window_merge(received[None, :, :, None], m, g, g)[0, :, :, 0]
    ids = torch.arange(received.size(0))[:, None].expand(-1, m * m).float()
    window = window_merge(ids[None, :, :, None], m, g, g)[0, :, :, 0].long()
    if shift:  # undo the cyclic shift: back to the image's own order
        grid = torch.roll(grid, shifts=(shift, shift), dims=(0, 1))
        window = torch.roll(window, shifts=(shift, shift), dims=(0, 1))
    probs = out.logits[0].float().softmax(-1).cpu()
    return WindowAttentionMap(grid, window, m, shift, stage, probs)


def plot_window_attention(
    image: Tensor, attention: WindowAttentionMap, path: str | Path, *, title: str = ""
) -> Path:
    """Draw ``image`` ``(C, H, W)``, the window weights with the windows, and the overlay (PNG)."""
    window = attention.window
    g = window.size(0)

    def borders(ax: Any, vmax: float) -> None:
        # A border wherever two neighbouring tokens sit in different windows.
        for r in range(g):
            for c in range(g):
                if c + 1 < g and window[r, c] != window[r, c + 1]:
                    ax.plot([c + 0.5, c + 0.5], [r - 0.5, r + 0.5], color="red", lw=2)
                if r + 1 < g and window[r, c] != window[r + 1, c]:
                    ax.plot([c - 0.5, c + 0.5], [r + 0.5, r + 0.5], color="red", lw=2)

    m = attention.window_size
    shifted = f", shifted by {attention.shift}" if attention.shift else ""
    return plot_grid_over_image(
        image, attention.grid, path, title=title, decorate=borders,
        grid_title=f"stage {attention.stage}: windows of {m}x{m}{shifted}",
    )  # fmt: skip
