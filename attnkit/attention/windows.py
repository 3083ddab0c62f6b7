"""Shifted-window self-attention on a 2-D grid of tokens (Swin, Liu et al., 2021, §3.2).

A ``(H, W)`` grid is cut into non-overlapping ``M x M`` windows and each token
attends only to the tokens of its own window: ``O(H W M^2)`` instead of
``O((H W)^2)``. Every other layer shifts the windows by ``s = M // 2`` so that
information crosses window borders. The paper's efficient batch computation
(§3.2, Figure 4) is what runs here:

1. roll the grid by ``(-s, -s)`` (a cyclic shift), so the shifted windows become
   the ordinary grid windows of the rolled grid;
2. a window that now holds tokens from different sides of the wrap-around must
   not mix them: each token gets a region label (which of the 3 x 3 regions of
   the un-rolled grid it came from), and a token may attend to a key only with
   the same label (``shifted_window_mask``; True = may attend);
3. attend within every window, then roll back by ``(s, s)``.

Each head adds a learned relative position bias ``B[dy, dx]`` from a
``((2M - 1)^2, h)`` table (eq. 4): ``relative_position_index`` maps every pair
of positions of a window to its row of the table.

``window_attention_dense_equivalent`` builds the same computation as ONE dense
attention over all ``H W`` tokens (the mask and bias of every pair), so the
tests can check the batched shifted computation against it exactly.

Shapes: ``B`` batch, ``H``/``W`` grid size, ``C`` channels, ``M`` window size,
``s`` shift, ``n = M * M`` tokens per window, ``nW`` windows per image, ``h`` heads.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnkit.attention.functional import attend


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


def relative_position_index(window: int) -> Tensor:
    """``(n, n)`` long: the bias-table row of every (query, key) pair of one window.

    Row ``(dy + M - 1) * (2M - 1) + (dx + M - 1)`` holds offset ``(dy, dx)`` =
    query position minus key position, each in ``[-(M - 1), M - 1]``.
    """
    coords = torch.stack(
        torch.meshgrid(torch.arange(window), torch.arange(window), indexing="ij")
    ).flatten(1)  # (2, n): (row, col) of each position
    offsets = coords[:, :, None] - coords[:, None, :] + (window - 1)  # (2, n, n)
    return offsets[0] * (2 * window - 1) + offsets[1]


def shifted_window_mask(height: int, width: int, window: int, shift: int) -> Tensor:
    """``(nW, n, n)`` bool, True = may attend, for windows of the grid rolled by ``-shift``.

    Tokens are labelled by the region (of the ``[0, H - M), [H - M, H - s),
    [H - s, H)`` bands, and likewise for columns) they occupy before the roll;
    the roll brings the last ``s`` rows/columns next to the first ones, and
    only tokens of one region may see each other.
    """
    labels = torch.zeros(height, width, dtype=torch.long)
    bands = ((0, -window), (-window, -shift), (-shift, None))
    region = 0
    for rows in bands:
        for cols in bands:
            labels[slice(*rows), slice(*cols)] = region
            region += 1
    windows = window_partition(labels[None, :, :, None], window).squeeze(-1)  # (nW, n)
    return windows[:, :, None] == windows[:, None, :]


class WindowAttention(nn.Module):
    """Multi-head self-attention inside (shifted) windows, with the relative position bias.

    Args:
        dim: channels C (divisible by ``num_heads``).
        num_heads: heads h.
        window: window size M.
        dropout: dropout on the attention weights.
    """

    relative_index: Tensor

    def __init__(self, dim: int, num_heads: int, window: int, dropout: float = 0.0):
        super().__init__()
        if dim % num_heads:
            raise ValueError(f"num_heads: {num_heads} does not divide the width {dim}")
        self.num_heads, self.window, self.dropout = num_heads, window, dropout
        self.head_dim = dim // num_heads
        self.qkv_proj = nn.Linear(dim, 3 * dim)
        self.out_proj = nn.Linear(dim, dim)
        self.bias_table = nn.Parameter(torch.zeros((2 * window - 1) ** 2, num_heads))
        nn.init.trunc_normal_(self.bias_table, std=0.02)  # as the paper's code
        # A function of M, not a weight: rebuilt at load, never stored.
        self.register_buffer("relative_index", relative_position_index(window), persistent=False)

    def position_bias(self) -> Tensor:
        """``(h, n, n)``: each head's bias for every (query, key) pair of a window."""
        n = self.window * self.window
        return self.bias_table[self.relative_index.reshape(-1)].view(n, n, -1).permute(2, 0, 1)

    def forward(
        self, x: Tensor, shift: int = 0, *, need_weights: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        """Attend within the windows of ``x`` ``(B, H, W, C)`` shifted by ``shift``.

        Returns ``(out (B, H, W, C), weights or None)``; the weights are
        ``(B, nW, h, n, n)`` in the rolled grid's window order.
        """
        b, height, width, c = x.shape
        m = self.window
        if height % m or width % m:
            raise ValueError(f"window: {m} does not divide the grid {height}x{width}")
        if shift:
            x = torch.roll(x, shifts=(-shift, -shift), dims=(1, 2))
        windows = window_partition(x, m)  # (B nW, n, C)
        bw, n, _ = windows.shape
        qkv = self.qkv_proj(windows).view(bw, n, 3, self.num_heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # (B nW, h, n, d) each
        mask = None
        if shift:
            num_windows = bw // b
            mask = shifted_window_mask(height, width, m, shift).to(x.device)
            mask = mask[None, :, None].expand(b, num_windows, 1, n, n).reshape(bw, 1, n, n)
        out, weights = attend(
            q, k, v, mask=mask, bias=self.position_bias().to(q.dtype),
            dropout_p=self.dropout if self.training else 0.0, need_weights=need_weights,
        )  # fmt: skip
        out = self.out_proj(out.transpose(1, 2).reshape(bw, n, c))
        out = window_merge(out, m, height, width)
        if shift:
            out = torch.roll(out, shifts=(shift, shift), dims=(1, 2))
        if weights is not None:
            weights = weights.view(b, -1, self.num_heads, n, n)
        return out, weights


def window_attention_dense_equivalent(module: WindowAttention, x: Tensor, shift: int = 0) -> Tensor:
    """What ``module(x, shift)`` computes, as ONE dense attention over the ``H W`` tokens.

    Token ``i`` may see token ``j`` when, after the roll, both fall in the same
    window and in the same region; the bias of the pair is the table row of
    their offset in the un-rolled grid (a pair of one region keeps its offset
    through the roll). For the tests: ``O((H W)^2)``, no windows involved.
    """
    b, height, width, c = x.shape
    m = module.window
    rows, cols = torch.meshgrid(torch.arange(height), torch.arange(width), indexing="ij")
    rolled_rows, rolled_cols = (rows - shift) % height, (cols - shift) % width
    window_id = (rolled_rows // m) * (width // m) + rolled_cols // m
    labels = torch.zeros(height, width, dtype=torch.long)
    if shift:
        # The region labels of shifted_window_mask, read in the un-rolled grid.
        rows_at = torch.tensor([height - m, height - shift])
        cols_at = torch.tensor([width - m, width - shift])
        band_r = torch.bucketize(rolled_rows, rows_at, right=True)
        labels = band_r * 3 + torch.bucketize(rolled_cols, cols_at, right=True)
    window_id, labels = window_id.flatten(), labels.flatten()
    mask = (window_id[:, None] == window_id[None, :]) & (labels[:, None] == labels[None, :])
    # Offsets outside [-(M - 1), M - 1] occur only for pairs the mask forbids.
    dy = (rows.flatten()[:, None] - rows.flatten()[None, :] + m - 1).clamp(0, 2 * m - 2)
    dx = (cols.flatten()[:, None] - cols.flatten()[None, :] + m - 1).clamp(0, 2 * m - 2)
    bias = module.bias_table[(dy * (2 * m - 1) + dx).reshape(-1)]
    bias = bias.view(height * width, height * width, -1).permute(2, 0, 1)
    tokens = x.reshape(b, height * width, c)
    qkv = module.qkv_proj(tokens).view(b, -1, 3, module.num_heads, module.head_dim)
    q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
    out, _ = attend(q, k, v, mask=mask, bias=bias.to(q.dtype))
    out = module.out_proj(out.transpose(1, 2).reshape(b, height * width, c))
    result: Tensor = out.view(b, height, width, c)
    return result
