"""Where a Vision Transformer looks: attention over the patches, drawn on the image.

``patch_attention`` reads one layer's self-attention (one head or the mean of
heads) for one image: with a class token, the class token's row over the
patches (what the classifier's summary attends to); with mean pooling, the
attention each patch receives, averaged over every query. ``plot_patch_attention``
draws the image, the patch grid of weights, and the weights upsampled over the
image.

Shapes: ``C`` channels, ``H``/``W`` image size, ``g`` patches per side.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from attnkit.models.vit import VisionTransformer
from attnkit.visualize.attention import select_heads
from attnkit.visualize.figures import pyplot, save_figure


@dataclass
class PatchAttention:
    """One image's attention map.

    Attributes:
        grid: ``(g, g)`` weight of each patch (row-major, as ``patchify`` cuts them).
        self_weight: the class token's weight on itself (0 without one).
        probs: ``(K,)`` the model's class probabilities for the image.
        query: what the grid shows ("class token" or "mean over patches").
    """

    grid: Tensor
    self_weight: float
    probs: Tensor
    query: str


@torch.no_grad()
def patch_attention(
    model: VisionTransformer, image: Tensor, *, layer: int = -1, head: int | None = None
) -> PatchAttention:
    """Layer ``layer``'s attention (head ``head`` or the mean) for ``image`` ``(C, H, W)``."""
    model.eval()
    device = next(model.parameters()).device
    out = model(image[None].to(device), need_weights=True)
    weights = select_heads(out.attentions, layer=layer, head=head)[0].float().cpu()  # (S, S)
    config = model.config
    side = config.image_size // config.patch_size
    if config.pooling == "cls":
        row, self_weight, query = weights[0, 1:], float(weights[0, 0]), "class token"
    else:
        row, self_weight, query = weights.mean(0), 0.0, "mean over patches"
    probs = out.logits[0].float().softmax(-1).cpu()
    return PatchAttention(row.reshape(side, side), self_weight, probs, query)


def plot_patch_attention(
    image: Tensor, attention: PatchAttention, path: str | Path, *, title: str = ""
) -> Path:
    """Draw ``image`` ``(C, H, W)``, the patch weights, and the weights over the image (PNG)."""
    grid = attention.grid

    def numbers(ax: Any, vmax: float) -> None:
        if grid.numel() > 64:  # the numbers fit in the cells of small grids only
            return
        for (r, c), value in zip(
            [(r, c) for r in range(grid.size(0)) for c in range(grid.size(1))], grid.flatten()
        ):
            ax.text(c, r, f"{float(value):.2f}", ha="center", va="center", fontsize=8,
                    color="white" if float(value) < 0.6 * vmax else "black")  # fmt: skip

    return plot_grid_over_image(
        image, grid, path, grid_title=f"attention of the {attention.query}", title=title,
        decorate=numbers,
    )  # fmt: skip


def plot_grid_over_image(
    image: Tensor,
    grid: Tensor,
    path: str | Path,
    *,
    grid_title: str,
    title: str = "",
    decorate: Callable[[Any, float], None] | None = None,
) -> Path:
    """Three panels (PNG): ``image`` ``(C, H, W)``; the ``(g, g)`` grid of weights (then
    ``decorate(axes, vmax)`` draws on it); the weights spread over the image."""
    img = image.detach().float().cpu()
    shown = img[0] if img.size(0) == 1 else img.permute(1, 2, 0)
    cmap = "gray" if img.size(0) == 1 else None
    h, w = img.shape[1:]
    # Each cell's weight spread over its pixels (nearest neighbour: the cell edges stay visible).
    over = torch.kron(grid, torch.ones(h // grid.size(0), w // grid.size(1)))
    vmax = max(float(grid.max()), 1e-6)
    fig, axes = pyplot().subplots(1, 3, figsize=(10, 3.8))
    axes[0].imshow(shown.numpy(), cmap=cmap, vmin=0.0, vmax=1.0)
    axes[0].set_title("image", fontsize=9)
    im = axes[1].imshow(grid.numpy(), cmap="viridis", vmin=0.0, vmax=vmax)
    if decorate is not None:
        decorate(axes[1], vmax)
    axes[1].set_title(grid_title, fontsize=9)
    fig.colorbar(im, ax=axes[1], fraction=0.046, pad=0.04)
    axes[2].imshow(shown.numpy(), cmap=cmap, vmin=0.0, vmax=1.0)
    axes[2].imshow(over.numpy(), cmap="viridis", alpha=0.55, vmin=0.0, vmax=vmax)
    axes[2].set_title("overlaid", fontsize=9)
    for ax in axes:
        ax.set_xticks([])
        ax.set_yticks([])
    if title:
        fig.suptitle(title, fontsize=10)
    return save_figure(fig, path)
