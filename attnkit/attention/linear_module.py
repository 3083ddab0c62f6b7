"""``LinearSelfAttention``: the multi-head module around the linear-attention kernels of
``attnkit.attention.linear`` (Katharopoulos et al., 2020), a drop-in for
``MultiHeadAttention`` in self-attention.

Shapes: ``B`` batch, ``T`` length, ``D`` model width, ``h`` heads.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor, nn

from attnkit.attention.linear import (
    DEFAULT_EPS,
    LinearAttentionState,
    causal_linear_attention,
    linear_attention,
    linear_attention_step,
    linear_attention_weights,
)
from attnkit.roles import Projection, Roles, projection


class StateView(Protocol):
    """One layer's decoding state, read and replaced (``RecurrentLayerView``)."""

    @property
    def state(self) -> LinearAttentionState | None: ...

    @state.setter
    def state(self, value: LinearAttentionState) -> None: ...


class LinearSelfAttention(nn.Module):
    """Multi-head self-attention with linear attention inside; a drop-in for
    ``MultiHeadAttention`` in self-attention (same ``qkv_proj``/``out_proj`` layout).

    There is no ``(T, T)`` matrix, so the only mask it takes is a key padding
    mask; causality is ``is_causal``. No attention dropout: no weights exist
    to drop (the authors' models have none either).
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        bias: bool = True,
        *,
        chunk_size: int = 64,
        eps: float = DEFAULT_EPS,
    ):
        super().__init__()
        if d_model % num_heads != 0:
            raise ValueError(
                f"num_heads: d_model={d_model} is not divisible by num_heads={num_heads}"
            )
        self.d_model, self.num_heads = d_model, num_heads
        self.head_dim = d_model // num_heads
        self.chunk_size, self.eps = chunk_size, eps
        self.qkv_proj = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def roles(self) -> Roles:
        """``qkv_proj``: ``D`` query, key and value rows each; ``out_proj``: ``o``."""
        d = self.d_model
        return Roles((Projection("qkv_proj", ("q", "k", "v"), (d, d, d)),
                      projection("out_proj", "o")))  # fmt: skip

    def _qkv(self, x: Tensor) -> tuple[Tensor, ...]:
        """``(B, T, D)`` -> three ``(B, h, T, d)``."""
        b, t, _ = x.shape
        qkv = self.qkv_proj(x).view(b, t, 3, self.num_heads, self.head_dim)
        return tuple(qkv.permute(2, 0, 3, 1, 4))

    def _merge(self, out: Tensor) -> Tensor:
        b, _, t, _ = out.shape
        merged: Tensor = self.out_proj(out.transpose(1, 2).reshape(b, t, self.d_model))
        return merged

    def forward(
        self,
        x: Tensor,
        *,
        mask: Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
        cache: StateView | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """``x`` ``(B, T, D)`` -> ``((B, T, D), weights (B, h, T, T) or None)``.

        ``mask``: key padding only, ``(B, T)`` or ``(B, 1, 1, T)``, True = real.
        The weights (``linear_attention_weights``) are quadratic: inspection only.
        ``cache``: a ``RecurrentLayerView`` when decoding: the new tokens
        continue its state (causal), which is replaced by the state after them.
        """
        if cache is not None:
            state = cache.state if cache.state is not None else self.empty_state(x.size(0))
            if x.size(1) == 1:
                out, cache.state = self.step(x, state)
            else:
                out, cache.state = self.prefill(x, state)
            return out, None
        q, k, v = self._qkv(x)
        if is_causal:
            out, _ = causal_linear_attention(
                q, k, v, key_padding_mask=mask, chunk_size=self.chunk_size, eps=self.eps
            )
        else:
            out = linear_attention(q, k, v, key_padding_mask=mask, eps=self.eps)
        weights = None
        if need_weights:
            weights = linear_attention_weights(
                q, k, causal=is_causal, key_padding_mask=mask, eps=self.eps
            )
        return self._merge(out), weights

    def empty_state(
        self, batch: int, *, dtype: torch.dtype | None = None, device: torch.device | None = None
    ) -> LinearAttentionState:
        """A zero state for ``batch`` sequences (dtype/device default to the weights')."""
        w = self.qkv_proj.weight
        return LinearAttentionState.zeros(
            batch,
            self.num_heads,
            self.head_dim,
            dtype=w.dtype if dtype is None else dtype,
            device=w.device if device is None else device,
        )

    def prefill(
        self, x: Tensor, state: LinearAttentionState | None = None
    ) -> tuple[Tensor, LinearAttentionState]:
        """Causal attention over a prompt ``(B, T, D)``; returns the state to step on."""
        q, k, v = self._qkv(x)
        out, state = causal_linear_attention(
            q, k, v, state=state, chunk_size=self.chunk_size, eps=self.eps
        )
        return self._merge(out), state

    def step(self, x_t: Tensor, state: LinearAttentionState) -> tuple[Tensor, LinearAttentionState]:
        """One new token ``(B, 1, D)`` -> ``((B, 1, D), new state)``; ``O(h d^2)`` work."""
        q, k, v = self._qkv(x_t)
        out, state = linear_attention_step(q, k, v, state, eps=self.eps)
        return self._merge(out), state
