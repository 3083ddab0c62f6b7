"""Attention backends: how an attention module computes softmax attention, handed in.

An attention module (``MultiHeadAttention``, ``CrossAttention``) projects its
inputs, builds its position terms and masks, then calls its ``backend`` with
the heads. A backend is any object with ``attend``'s signature
(``AttentionBackend``); every backend computes the same function, and they
differ only in how fast they are where. Which one a module uses is decided
where the decoding or training strategy is chosen, never inside the
attention code by looking at the device, the grad mode or the compile state
(ARCHITECTURE.md, principle 13):

* ``REFERENCE`` (``Reference``): ``attend``, i.e. PyTorch's fused SDPA, or the
  explicit path when weights, relative positions or another score are asked
  for. Every model is built with it; training and the compiled decode step use it.
* ``OneQueryDecode`` (``attnkit.attention.one_query``): one query per row (a
  decode step) as two batched GEMVs, several times cheaper than SDPA on the
  CPU; every other call goes to ``attend``. ``attnkit.inference.stepper_for``
  installs it for the CPU decode paths, ``attnkit.quantize.quantize_model``
  for the CPU inference model it makes.

What changes the function itself is no backend but a part the module is built
with: a local window (``attnkit.attention.local.LocalWindow``, which runs whole
sequences through the chunked kernel), ALiBi, rotary or relative positions, a
score; linear attention is another module (``LinearSelfAttention``).

``use_backend(model, backend)`` installs a backend in every attention module
of a model (an attribute, not a module: nothing enters the state dict).

Shapes: ``B`` batch, ``h`` heads, ``h_kv`` key/value heads, ``Tq``/``Tk``
query/key lengths, ``d`` head dim.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from torch import Tensor, nn

from attnkit.attention.functional import ScoreFn, attend
from attnkit.attention.masks import Mask, bool_mask
from attnkit.positions.relative import RelativePositionTerms


class AttentionBackend(Protocol):
    """``attend``'s contract: ``softmax(score(q, k) + bias, masked) v`` and the weights on request.

    ``q`` ``(B, h, Tq, d)``; ``k``, ``v`` ``(B, h_kv, Tk, d)``; ``mask`` a bool
    tensor broadcastable to ``(B, h, Tq, Tk)`` (True = may attend) or a
    ``PreparedMask`` carrying one. Returns ``(out (B, h, Tq, d), weights or None)``.
    """

    def __call__(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        *,
        mask: Mask | None = None,
        is_causal: bool = False,
        dropout_p: float = 0.0,
        need_weights: bool = False,
        scale: float | None = None,
        position: RelativePositionTerms | None = None,
        score: ScoreFn | None = None,
        bias: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]: ...


class Reference:
    """``attend``: fused SDPA, or the explicit path for weights, relative positions, scores."""

    def __call__(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        *,
        mask: Mask | None = None,
        is_causal: bool = False,
        dropout_p: float = 0.0,
        need_weights: bool = False,
        scale: float | None = None,
        position: RelativePositionTerms | None = None,
        score: ScoreFn | None = None,
        bias: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        return attend(
            q, k, v, mask=bool_mask(mask), is_causal=is_causal, dropout_p=dropout_p,
            need_weights=need_weights, scale=scale, position=position, score=score, bias=bias,
        )  # fmt: skip

    def __repr__(self) -> str:
        return "Reference()"


REFERENCE = Reference()


@runtime_checkable
class TakesBackend(Protocol):
    """An attention module whose backend can be replaced."""

    backend: AttentionBackend


def use_backend(model: nn.Module, backend: AttentionBackend) -> int:
    """Install ``backend`` in every attention module of ``model``; returns how many."""
    count = 0
    for module in model.modules():
        if isinstance(module, TakesBackend):
            module.backend = backend
            count += 1
    return count
