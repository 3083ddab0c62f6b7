"""The Swin forward as it was before issue 27's speed-up, kept verbatim as a reference.

The optimized ``attnkit.attention.windows.WindowAttention`` gathers windows with one
cached index, caches the shift mask and adds the bias once per window instead of per
image; this is the original roll / partition / per-forward mask / ``attend`` version,
run on the new modules' own parameters, so the tests can check that the two compute
the same function (``test_swin_equivalence.py``).

Shapes: ``B`` batch, ``H``/``W`` grid size, ``C`` channels, ``M`` window size,
``n = M * M`` tokens per window, ``nW`` windows per image, ``h`` heads.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attnkit.attention.functional import attend
from attnkit.attention.windows import WindowAttention
from attnkit.models.swin import SwinBlock, SwinOutput, SwinTransformer


def window_partition(x: Tensor, window: int) -> Tensor:
    """``(B, H, W, C)`` -> ``(B * nW, M * M, C)``, windows in row-major order."""
    b, h, w, c = x.shape
    x = x.view(b, h // window, window, w // window, window, c)
    return x.permute(0, 1, 3, 2, 4, 5).reshape(-1, window * window, c)


def window_merge(windows: Tensor, window: int, height: int, width: int) -> Tensor:
    """The inverse of ``window_partition``: ``(B * nW, M * M, C)`` -> ``(B, H, W, C)``."""
    c = windows.size(-1)
    x = windows.view(-1, height // window, width // window, window, window, c)
    return x.permute(0, 1, 3, 2, 4, 5).reshape(-1, height, width, c)


def shifted_window_mask(height: int, width: int, window: int, shift: int) -> Tensor:
    """``(nW, n, n)`` bool, True = may attend, for windows of the grid rolled by ``-shift``."""
    labels = torch.zeros(height, width, dtype=torch.long)
    bands = ((0, -window), (-window, -shift), (-shift, None))
    region = 0
    for rows in bands:
        for cols in bands:
            labels[slice(*rows), slice(*cols)] = region
            region += 1
    windows = window_partition(labels[None, :, :, None], window).squeeze(-1)  # (nW, n)
    return windows[:, :, None] == windows[:, None, :]


def position_bias(module: WindowAttention) -> Tensor:
    """``(h, n, n)``: each head's bias for every (query, key) pair of a window."""
    n = module.window * module.window
    return module.bias_table[module.relative_index.reshape(-1)].view(n, n, -1).permute(2, 0, 1)


def window_attention(
    module: WindowAttention, x: Tensor, shift: int = 0, *, need_weights: bool = False
) -> tuple[Tensor, Tensor | None]:
    """The old ``WindowAttention.forward``: ``(B, H, W, C)`` -> ``(B, H, W, C)``, weights."""
    b, height, width, c = x.shape
    m = module.window
    if shift:
        x = torch.roll(x, shifts=(-shift, -shift), dims=(1, 2))
    windows = window_partition(x, m)  # (B nW, n, C)
    bw, n, _ = windows.shape
    qkv = module.qkv_proj(windows).view(bw, n, 3, module.num_heads, module.head_dim)
    q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # (B nW, h, n, d) each
    mask = None
    if shift:
        num_windows = bw // b
        mask = shifted_window_mask(height, width, m, shift).to(x.device)
        mask = mask[None, :, None].expand(b, num_windows, 1, n, n).reshape(bw, 1, n, n)
    out, weights = attend(
        q, k, v, mask=mask, bias=position_bias(module).to(q.dtype),
        dropout_p=module.dropout if module.training else 0.0, need_weights=need_weights,
    )  # fmt: skip
    out = module.out_proj(out.transpose(1, 2).reshape(bw, n, c))
    out = window_merge(out, m, height, width)
    if shift:
        out = torch.roll(out, shifts=(shift, shift), dims=(1, 2))
    if weights is not None:
        weights = weights.view(b, -1, module.num_heads, n, n)
    return out, weights


def swin_block(
    block: SwinBlock, x: Tensor, need_weights: bool = False
) -> tuple[Tensor, Tensor | None]:
    """The old ``SwinBlock.forward`` on ``(B, H, W, C)``."""
    out, weights = window_attention(
        block.attn, block.norm1(x), block.shift, need_weights=need_weights
    )
    x = x + block.dropout(out)
    return x + block.dropout(block.mlp(block.norm2(x))), weights


def swin_forward(model: SwinTransformer, images: Tensor, need_weights: bool = False) -> SwinOutput:
    """The old ``SwinTransformer.forward``: ``(B, C, H, W)`` images -> logits and hidden."""
    c = model.config
    grid = c.stage_grid(0)
    x = model.embed_norm(model.patch_embed(images)).view(images.size(0), grid, grid, -1)
    x = model.dropout(x)
    attentions: list[Tensor] = []
    blocks = model.blocks()
    for index, (stage, block) in enumerate(blocks):
        x, weights = swin_block(block, x, need_weights=need_weights)
        if weights is not None:
            attentions.append(weights)
        last_of_stage = index + 1 == len(blocks) or blocks[index + 1][0] != stage
        if last_of_stage and stage < len(model.merges):
            x = model.merges[stage](x)
    pooled = model.norm(x).mean(dim=(1, 2))
    return SwinOutput(model.head(pooled), x, attentions if need_weights else None)
