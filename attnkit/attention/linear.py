"""Linear attention (Katharopoulos et al., 2020, "Transformers are RNNs").

Softmax attention ``softmax(q_i . k_j) v_j`` is replaced by a kernel
``sim(q, k) = phi(q) . phi(k)`` with the feature map ``phi(x) = elu(x) + 1``
(their §3.2.1: positive, so the normaliser never vanishes). Associativity then
gives (their eq. 5)::

    out_i = phi(q_i)^T (sum_j phi(k_j) v_j^T) / (phi(q_i)^T sum_j phi(k_j))
          = phi(q_i)^T S / (phi(q_i)^T z)

so the ``(Tq, Tk)`` matrix is never formed: time and memory are linear in the
length. Three forms, equal up to rounding (tested in float64 to 1e-10):

* ``linear_attention``: non-causal, ``S`` and ``z`` summed over all (real) keys;
  padded keys get ``phi(k) = 0``, which removes them from ``S`` and ``z`` exactly.
* ``causal_linear_attention``: ``S_i`` and ``z_i`` are prefix sums over keys
  ``j <= i`` (their eq. 9). Done chunkwise: a prefix sum of per-chunk states
  carries the past, a masked ``(c, c)`` product handles the chunk itself, so
  memory is ``O(B h T (d dv / c + c + d + dv))`` instead of the
  ``O(B h T d dv)`` of a per-token ``cumsum`` of outer products.
* ``LinearAttentionState`` + ``linear_attention_step``: the RNN form (their
  §3.4), ``O(d dv)`` state per head whatever the length, for decoding.

The denominator rides along the numerator: ``v`` is extended by a column of
ones, so one product gives ``[phi(q)^T S, phi(q)^T z]``.

Shapes: ``B`` batch, ``h`` heads, ``T``/``Tq``/``Tk`` lengths, ``d`` query/key
head dim, ``dv`` value head dim.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

FeatureMap = Callable[[Tensor], Tensor]

DEFAULT_EPS = 1e-6  # added to the normaliser, as in the authors' code


def elu_feature_map(x: Tensor) -> Tensor:
    """``phi(x) = elu(x) + 1`` (Katharopoulos et al., §3.2.1): positive everywhere."""
    return F.elu(x) + 1.0


def _key_mask(mask: Tensor | None, b: int, tk: int) -> Tensor | None:
    """A key padding mask ``(B, Tk)`` or ``(B, 1, 1, Tk)`` -> ``(B, 1, Tk, 1)`` (True = real)."""
    if mask is None:
        return None
    if mask.dtype != torch.bool:
        raise ValueError(f"key_padding_mask: expected a bool mask, got {mask.dtype}")
    if mask.dim() == 4:
        if mask.shape[1:3] != (1, 1):
            raise ValueError(
                f"key_padding_mask: expected (B, Tk) or (B, 1, 1, Tk), got {tuple(mask.shape)}"
            )
        mask = mask[:, 0, 0]
    if mask.dim() != 2 or mask.size(-1) != tk or mask.size(0) not in (1, b):
        raise ValueError(
            f"key_padding_mask: expected (B, Tk) = ({b}, {tk}), got {tuple(mask.shape)}"
        )
    return mask[:, None, :, None]


def _with_ones(v: Tensor) -> Tensor:
    """``(..., T, dv)`` -> ``(..., T, dv + 1)``: the last column yields the normaliser."""
    return torch.cat([v, v.new_ones(*v.shape[:-1], 1)], dim=-1)


def _normalise(num: Tensor, eps: float) -> Tensor:
    """``[phi(q)^T S, phi(q)^T z]`` ``(..., dv + 1)`` -> ``(..., dv)``."""
    return num[..., :-1] / (num[..., -1:] + eps)


def linear_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    key_padding_mask: Tensor | None = None,
    eps: float = DEFAULT_EPS,
    feature_map: FeatureMap = elu_feature_map,
) -> Tensor:
    """Non-causal linear attention, ``O(B h (Tq + Tk) d dv)`` time.

    Args:
        q: ``(B, h, Tq, d)``; k: ``(B, h, Tk, d)``; v: ``(B, h, Tk, dv)``.
        key_padding_mask: bool ``(B, Tk)`` or ``(B, 1, 1, Tk)``, True = real key.
        eps: added to the normaliser ``phi(q)^T z``.

    Returns:
        ``(B, h, Tq, dv)``. A row whose keys are all padding returns zeros.
    """
    phi_k = feature_map(k)
    real = _key_mask(key_padding_mask, k.size(0), k.size(-2))
    if real is not None:
        phi_k = phi_k.masked_fill(~real, 0.0)
    s = phi_k.transpose(-2, -1) @ _with_ones(v)  # (B, h, d, dv + 1): [S, z]
    return _normalise(feature_map(q) @ s, eps)


@dataclass
class LinearAttentionState:
    """The recurrent state of causal linear attention after some prefix of keys.

    Attributes:
        s: ``(B, h, d, dv)``, ``sum_j phi(k_j) v_j^T``.
        z: ``(B, h, d)``, ``sum_j phi(k_j)``.

    Its size is fixed whatever the length (the RNN view, §3.4). Updates return
    a new state, so a reordered copy never aliases the one it came from.
    """

    s: Tensor
    z: Tensor

    @classmethod
    def zeros(
        cls,
        batch: int,
        heads: int,
        dim: int,
        value_dim: int | None = None,
        *,
        dtype: torch.dtype | None = None,
        device: torch.device | None = None,
    ) -> LinearAttentionState:
        """The empty prefix: ``S = 0``, ``z = 0``."""
        value_dim = dim if value_dim is None else value_dim
        s = torch.zeros(batch, heads, dim, value_dim, dtype=dtype, device=device)
        return cls(s, s.new_zeros(batch, heads, dim))

    def reorder(self, indices: Tensor) -> LinearAttentionState:
        """Select batch rows ``indices`` ``(B',)`` (beam search following its beams)."""
        return LinearAttentionState(
            self.s.index_select(0, indices), self.z.index_select(0, indices)
        )

    def _packed(self) -> Tensor:
        """``(B, h, d, dv + 1)``: ``[S, z]`` side by side, as the parallel forms use."""
        return torch.cat([self.s, self.z[..., None]], dim=-1)

    @classmethod
    def _unpack(cls, packed: Tensor) -> LinearAttentionState:
        return cls(packed[..., :-1], packed[..., -1])


def causal_linear_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    state: LinearAttentionState | None = None,
    key_padding_mask: Tensor | None = None,
    chunk_size: int = 64,
    eps: float = DEFAULT_EPS,
    feature_map: FeatureMap = elu_feature_map,
) -> tuple[Tensor, LinearAttentionState]:
    """Causal linear attention by chunked prefix sums: query ``i`` sees keys ``j <= i``.

    Args:
        q, k: ``(B, h, T, d)``; v: ``(B, h, T, dv)`` (queries and keys aligned).
        state: the state after earlier keys (a prompt already read); ``None``
            starts from zero. Query ``i`` then sees the earlier keys too.
        key_padding_mask: bool ``(B, T)`` or ``(B, 1, 1, T)``, True = real key
            (only needed for left padding: right padding never precedes a query).
        chunk_size: ``c``. Memory ``O(B h T (d dv / c + c + d + dv))``; the
            per-token ``cumsum`` of outer products (``c = 1``) would need
            ``O(B h T d dv)``. ``c`` near ``sqrt(d dv)`` balances the two terms.

    Returns:
        ``(out (B, h, T, dv), state after the last key)``; hand the state to
        ``linear_attention_step`` to continue token by token.
    """
    if q.size(-2) != k.size(-2):
        raise ValueError(
            f"q: causal linear attention aligns queries with keys; got Tq={q.size(-2)}, "
            f"Tk={k.size(-2)} (pass the earlier keys as `state`)"
        )
    if chunk_size < 1:
        raise ValueError(f"chunk_size: must be >= 1, got {chunk_size}")
    b, h, t, d = q.shape
    phi_q, phi_k = feature_map(q), feature_map(k)
    real = _key_mask(key_padding_mask, b, t)
    if real is not None:
        phi_k = phi_k.masked_fill(~real, 0.0)
    va = _with_ones(v)  # (B, h, T, dv + 1)

    c = min(chunk_size, max(t, 1))
    n = -(-t // c)
    pad = n * c - t
    if pad:  # zero features add nothing to any sum; the padded rows are cut off below
        phi_q, phi_k, va = (F.pad(x, (0, 0, 0, pad)) for x in (phi_q, phi_k, va))
    phi_q = phi_q.view(b, h, n, c, d)
    phi_k = phi_k.view(b, h, n, c, d)
    va = va.view(b, h, n, c, va.size(-1))

    # Each chunk's own [S, z]: (B, h, n, d, dv + 1); an exclusive prefix sum over
    # chunks gives what every chunk inherits from the keys before it.
    chunk_states = phi_k.transpose(-2, -1) @ va
    inclusive = chunk_states.cumsum(dim=2)
    before = inclusive - chunk_states
    if state is not None:
        before = before + state._packed()[:, :, None]
    # Inside a chunk: the quadratic form with its lower triangle (j <= i).
    scores = (phi_q @ phi_k.transpose(-2, -1)).tril()
    num = phi_q @ before + scores @ va  # (B, h, n, c, dv + 1)
    out = _normalise(num, eps).reshape(b, h, n * c, -1)[:, :, :t]

    final = inclusive[:, :, -1]
    if state is not None:
        final = final + state._packed()
    return out, LinearAttentionState._unpack(final)


def linear_attention_step(
    q_t: Tensor,
    k_t: Tensor,
    v_t: Tensor,
    state: LinearAttentionState,
    *,
    eps: float = DEFAULT_EPS,
    feature_map: FeatureMap = elu_feature_map,
) -> tuple[Tensor, LinearAttentionState]:
    """One token of causal linear attention in ``O(d dv)`` per head (the RNN form, §3.4).

    Args:
        q_t, k_t: ``(B, h, d)`` or ``(B, h, 1, d)``; v_t: ``(B, h, dv)`` or ``(B, h, 1, dv)``.
        state: the state after the previous tokens (``LinearAttentionState.zeros`` at first).

    Returns:
        ``(out, new state)``; ``out`` is ``(B, h, dv)`` or ``(B, h, 1, dv)`` like ``q_t``.
    """
    one_step = q_t.dim() == 4
    if one_step:
        if q_t.size(2) != 1 or k_t.size(2) != 1 or v_t.size(2) != 1:
            raise ValueError(f"q_t: expected one token, got shape {tuple(q_t.shape)}")
        q_t, k_t, v_t = q_t[:, :, 0], k_t[:, :, 0], v_t[:, :, 0]
    phi_q, phi_k = feature_map(q_t), feature_map(k_t)
    s = state.s + phi_k[..., :, None] * v_t[..., None, :]  # S_i = S_{i-1} + phi(k_i) v_i^T
    z = state.z + phi_k
    num = (phi_q[..., None, :] @ s)[..., 0, :]
    den = (phi_q * z).sum(-1, keepdim=True)
    out = num / (den + eps)
    return (out[:, :, None] if one_step else out), LinearAttentionState(s, z)


def linear_attention_weights(
    q: Tensor,
    k: Tensor,
    *,
    causal: bool = False,
    key_padding_mask: Tensor | None = None,
    eps: float = DEFAULT_EPS,
    feature_map: FeatureMap = elu_feature_map,
) -> Tensor:
    """The implied attention matrix ``(B, h, Tq, Tk)``, for inspection on short inputs.

    ``A_ij = phi(q_i) . phi(k_j) / (sum_j' phi(q_i) . phi(k_j') + eps)``, so
    ``A @ v`` equals the linear forms. Quadratic in memory: never on the fast path.
    Causal queries are the last ``Tq`` of the ``Tk`` positions.
    """
    scores = feature_map(q) @ feature_map(k).transpose(-2, -1)
    tq, tk = scores.shape[-2:]
    if causal:
        keep = torch.ones(tq, tk, dtype=torch.bool, device=q.device).tril(tk - tq)
        scores = scores.masked_fill(~keep, 0.0)
    real = _key_mask(key_padding_mask, k.size(0), tk)
    if real is not None:
        scores = scores.masked_fill(~real.transpose(-2, -1), 0.0)
    return scores / (scores.sum(-1, keepdim=True) + eps)
