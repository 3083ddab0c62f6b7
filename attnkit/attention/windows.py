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
attention over all ``H W`` tokens (the mask and bias of every pair,
``dense_window_pairs``), so the tests can check the batched shifted computation
against it exactly.

What runs (issue 27: Swin's step on small images was mostly overhead): steps 1
and 3's rolls and the partition are one ``index_select`` each way by a cached
``window_order``; step 2's mask is built once per grid and shift as an additive
0 / -inf ``(nW, 1, n, n)`` tensor added to the ``(h, n, n)`` bias, which the
``baddbmm`` computing the scores adds in its output pass (no per-forward mask, no
``masked_fill``, no empty-row guard: every token sees itself); windows of fewer than 16
tokens on grids of at most 64 attend as one masked dense attention per image
(``use_dense``: a batched matmul of 4x4 matrices costs as much as one of 16x16).

Shapes: ``B`` batch, ``H``/``W`` grid size, ``C`` channels, ``M`` window size,
``s`` shift, ``n = M * M`` tokens per window, ``nW`` windows per image, ``h`` heads.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnkit.attention.functional import attend
from attnkit.roles import Projection, Roles, projection


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


def window_order(height: int, width: int, window: int, shift: int) -> Tensor:
    """``(H W,)`` long: the raster index of each token in window order, the roll included.

    ``tokens.index_select(1, order)`` on ``(B, H W, C)`` raster tokens does the cyclic
    shift and the partition in one copy; ``argsort(order)`` undoes both.
    """
    index = torch.arange(height * width).view(1, height, width, 1)
    if shift:
        index = torch.roll(index, shifts=(-shift, -shift), dims=(1, 2))
    return window_partition(index, window).flatten()


def dense_window_pairs(height: int, width: int, window: int, shift: int) -> tuple[Tensor, Tensor]:
    """``(mask, index)``, both ``(H W, H W)`` over raster tokens: the windows as one attention.

    ``mask`` (bool, True = may attend): after the roll, both tokens fall in the same
    window and in the same region of ``shifted_window_mask``. ``index``: the bias-table
    row of the pair's offset in the un-rolled grid (a pair of one region keeps its
    offset through the roll); offsets beyond ``M - 1`` occur only for pairs the mask
    forbids and are clamped to a valid row.
    """
    m = window
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
    dy = (rows.flatten()[:, None] - rows.flatten()[None, :] + m - 1).clamp(0, 2 * m - 2)
    dx = (cols.flatten()[:, None] - cols.flatten()[None, :] + m - 1).clamp(0, 2 * m - 2)
    return mask, dy * (2 * m - 1) + dx


def use_dense(tokens: int, window_tokens: int) -> bool:
    """Attend over the whole grid under the window mask instead of window by window?

    Measured on a 2-core EPYC, forward + backward: a batched matmul costs ~0.15 us per
    matrix however tiny, so windows of 2x2 or 3x3 (digits' 4x4 grid in windows of 2)
    run faster as one masked ``H W x H W`` attention per image and head, while 4x4 and
    larger windows, or grids of more than 64 tokens, do not.
    """
    return window_tokens < 16 and tokens <= 64


@dataclass(frozen=True)
class _Layout:
    """What one grid, shift, device and dtype need; built once, then read every forward.

    Windowed: ``order``/``inverse`` ``(H W,)`` (None when window order is raster order)
    and ``bias_mask`` ``(nW, 1, n, n)`` 0 / -inf (None without a shift). Dense:
    ``index`` ``(H W, H W)`` bias-table rows and ``bias_mask`` ``(H W, H W)``.
    """

    dense: bool
    order: Tensor | None
    inverse: Tensor | None
    index: Tensor | None
    bias_mask: Tensor | None


def _additive(mask: Tensor, dtype: torch.dtype) -> Tensor:
    """bool True = may attend -> 0, False -> -inf (exp(-inf) is an exact zero weight)."""
    return torch.zeros(mask.shape, dtype=dtype).masked_fill(~mask, float("-inf"))


@functools.lru_cache(maxsize=64)
def _cpu_layout(height: int, width: int, window: int, shift: int, dense: bool) -> _Layout:
    if dense:
        mask, index = dense_window_pairs(height, width, window, shift)
        return _Layout(True, None, None, index, None if mask.all() else mask)
    order = window_order(height, width, window, shift)
    identity = bool((order == torch.arange(order.numel())).all())
    shift_mask = shifted_window_mask(height, width, window, shift)[:, None] if shift else None
    inverse = None if identity else torch.argsort(order)
    return _Layout(False, None if identity else order, inverse, None, shift_mask)


class WindowAttention(nn.Module):
    """Multi-head self-attention inside (shifted) windows, with the relative position bias.

    Args:
        dim: channels C (divisible by ``num_heads``).
        num_heads: heads h.
        window: window size M.
        dropout: dropout on the attention weights.

    The forward is the paper's batched computation with its per-call overheads moved
    out: the roll and the partition are one ``index_select`` by a cached order, the
    shift mask is a cached additive 0 / -inf tensor per window, and scale and bias
    enter the scores in the one ``baddbmm`` that computes them. Tiny windows
    attend densely under the equivalent mask (``use_dense``). Same function as the
    roll / partition / ``attend`` version (``tests/models/test_swin_equivalence.py``).
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
        # Per (H, W, shift, dense, device, dtype): a grid's layout is fixed, the table is not.
        self._layouts: dict[tuple[object, ...], _Layout] = {}

    def roles(self) -> Roles:
        """``qkv_proj``: ``C`` query, key and value rows each; ``out_proj``: ``o``;
        ``bias_table``: a relative-position term."""
        c = self.num_heads * self.head_dim
        return Roles(
            (Projection("qkv_proj", ("q", "k", "v"), (c, c, c)), projection("out_proj", "o")),
            {"bias_table": "relative_position"},
        )

    def position_bias(self) -> Tensor:
        """``(h, n, n)``: each head's bias for every (query, key) pair of a window."""
        n = self.window * self.window
        return self.bias_table[self.relative_index.reshape(-1)].view(n, n, -1).permute(2, 0, 1)

    def _layout(self, height: int, width: int, shift: int, dense: bool, like: Tensor) -> _Layout:
        key = (height, width, shift, dense, like.device, like.dtype)
        layout = self._layouts.get(key)
        if layout is None:
            cpu = _cpu_layout(height, width, self.window, shift, dense)
            device = like.device

            def moved(t: Tensor | None) -> Tensor | None:
                return None if t is None else t.to(device)

            mask = None if cpu.bias_mask is None else _additive(cpu.bias_mask, like.dtype)
            layout = _Layout(dense, moved(cpu.order), moved(cpu.inverse), moved(cpu.index),
                             moved(mask))  # fmt: skip
            self._layouts[key] = layout
        return layout

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, bias: Tensor) -> tuple[Tensor, Tensor]:
        """``softmax(q k^T / sqrt(d) + bias) v`` with dropout, and the weights (pre-dropout).

        ``q``/``k``/``v`` ``(..., T, d)``; ``bias`` broadcastable to ``(..., T, T)``.
        One ``baddbmm`` scales the scores and adds the bias in the GEMM's own output
        pass (5-12% faster forward + backward than a matmul and an add, measured).
        """
        lead, t, d = q.shape[:-2], q.size(-2), q.size(-1)
        bias = bias.to(q.dtype).expand(*lead, t, t).reshape(-1, t, t)
        q3, k3, v3 = q.reshape(-1, t, d), k.reshape(-1, t, d), v.reshape(-1, t, d)
        scores = torch.baddbmm(bias, q3, k3.transpose(1, 2), alpha=self.head_dim**-0.5)
        # Half-precision scores are normalised in fp32, as attend's reference path does.
        acc = torch.float32 if scores.dtype in (torch.float16, torch.bfloat16) else scores.dtype
        weights = torch.softmax(scores, dim=-1, dtype=acc).to(q.dtype)
        p = self.dropout if self.training else 0.0
        dropped = F.dropout(weights, p=p) if p > 0.0 else weights
        return torch.bmm(dropped, v3).view(*lead, t, d), weights.view(*lead, t, t)

    def forward(
        self, x: Tensor, shift: int = 0, *, need_weights: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        """Attend within the windows of ``x`` ``(B, H, W, C)`` shifted by ``shift``.

        Returns ``(out (B, H, W, C), weights or None)``; the weights are
        ``(B, nW, h, n, n)`` in the rolled grid's window order.
        """
        b, height, width, c = x.shape
        m, h, d = self.window, self.num_heads, self.head_dim
        if height % m or width % m:
            raise ValueError(f"window: {m} does not divide the grid {height}x{width}")
        n, tokens = m * m, height * width
        dense = use_dense(tokens, n) and not need_weights  # the weights are per window
        layout = self._layout(height, width, shift, dense, x)
        flat = x.reshape(b, tokens, c)
        if dense:
            assert layout.index is not None
            bias = self.bias_table[layout.index].permute(2, 0, 1)  # (h, H W, H W)
            if layout.bias_mask is not None:
                bias = bias + layout.bias_mask
            qkv = self.qkv_proj(flat).view(b, tokens, 3, h, d).permute(2, 0, 3, 1, 4)
            q, k, v = qkv.unbind(0)  # (B, h, H W, d) each
            out, _ = self._attend(q, k, v, bias)
            out = self.out_proj(out.transpose(1, 2).reshape(b, tokens, c))
            return out.view(b, height, width, c), None
        if layout.order is not None:
            flat = flat.index_select(1, layout.order)  # roll + partition: (B, nW n, C)
        nw = tokens // n
        qkv = self.qkv_proj(flat).view(b, nw, n, 3, h, d).permute(3, 0, 1, 4, 2, 5)
        bias = self.position_bias()  # (h, n, n)
        if layout.bias_mask is not None:
            bias = bias + layout.bias_mask  # (nW, h, n, n): the shift mask per window
        q, k, v = qkv.unbind(0)  # (B, nW, h, n, d) each
        out, weights = self._attend(q, k, v, bias)
        out = self.out_proj(out.transpose(2, 3).reshape(b, tokens, c))
        if layout.inverse is not None:
            out = out.index_select(1, layout.inverse)  # back to raster order, roll undone
        return out.view(b, height, width, c), (weights if need_weights else None)


def window_attention_dense_equivalent(module: WindowAttention, x: Tensor, shift: int = 0) -> Tensor:
    """What ``module(x, shift)`` computes, as ONE dense attention over the ``H W`` tokens.

    Token ``i`` may see token ``j`` when, after the roll, both fall in the same
    window and in the same region; the bias of the pair is the table row of
    their offset in the un-rolled grid (a pair of one region keeps its offset
    through the roll). For the tests: ``O((H W)^2)``, no windows involved.
    """
    b, height, width, c = x.shape
    mask, index = dense_window_pairs(height, width, module.window, shift)
    bias = module.bias_table[index.reshape(-1)]
    bias = bias.view(height * width, height * width, -1).permute(2, 0, 1)
    tokens = x.reshape(b, height * width, c)
    qkv = module.qkv_proj(tokens).view(b, -1, 3, module.num_heads, module.head_dim)
    q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
    out, _ = attend(q, k, v, mask=mask, bias=bias.to(q.dtype))
    out = module.out_proj(out.transpose(1, 2).reshape(b, height * width, c))
    result: Tensor = out.view(b, height, width, c)
    return result
