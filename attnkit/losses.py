"""Label-smoothed cross-entropy (§5.4), plain and chunked over the vocabulary.

The training objective and the validation loss alike: training
(``attnkit.training``) and evaluation (``attnkit.evaluation``) both import it,
so it belongs to neither.

Shapes: ``N`` tokens (or ``B, T``), ``V`` vocabulary, ``D`` model width.

With smoothing ``eps`` the target distribution puts ``1 - eps`` on the gold
token and spreads ``eps`` uniformly over all ``V`` classes (the gold one
included), exactly like ``F.cross_entropy(..., label_smoothing=eps)``::

    loss = (1 - eps) * nll + eps * mean_v(-log p_v)
         = (1 - eps) * (lse - x_gold) + eps * (lse - mean_v x_v)

where ``lse = logsumexp_v x_v``. Written this way no ``(N, V)`` log-probability
tensor is kept for backward. The arithmetic is fp32 even for bf16/fp16 logits:
a bf16 logsumexp over 37k classes loses most of the loss's digits.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from attnkit.errors import UsageError

REDUCTIONS = ("sum", "mean", "none")


class LossOutput(NamedTuple):
    """What a loss call returns.

    ``loss``: the label-smoothed loss (what to backpropagate).
    ``nll``: the plain negative log-likelihood, same reduction (for
    perplexity: ``exp(nll_sum / n_tokens)``).
    ``n_tokens``: number of non-ignored targets, an int64 tensor (no device sync).
    With ``reduction="none"`` ``loss`` and ``nll`` have the target's shape and
    are 0 at ignored positions.
    """

    loss: Tensor
    nll: Tensor
    n_tokens: Tensor


def _check_options(epsilon: float, reduction: str) -> None:
    if not 0.0 <= epsilon < 1.0:
        raise UsageError(f"epsilon: label smoothing must be in [0, 1), got {epsilon}")
    if reduction not in REDUCTIONS:
        raise UsageError(f"reduction: expected one of {', '.join(REDUCTIONS)}, got {reduction!r}")


def _token_losses(
    logits: Tensor, target: Tensor, epsilon: float, ignore_index: int
) -> tuple[Tensor, Tensor, Tensor]:
    """``logits (N, V)``, ``target (N,)`` -> per-token ``(smoothed, nll, mask)``.

    Losses are fp32 and 0 where the target is ignored.
    """
    logits = logits.float()
    mask = target != ignore_index
    safe_target = torch.where(mask, target, torch.zeros_like(target))
    lse = torch.logsumexp(logits, dim=-1)
    nll = lse - logits.gather(-1, safe_target.unsqueeze(-1)).squeeze(-1)
    smoothed = (1.0 - epsilon) * nll + epsilon * (lse - logits.mean(dim=-1))
    zero = torch.zeros((), dtype=nll.dtype, device=nll.device)
    return torch.where(mask, smoothed, zero), torch.where(mask, nll, zero), mask


def _reduce(
    smoothed: Tensor, nll: Tensor, mask: Tensor, reduction: str, shape: torch.Size
) -> LossOutput:
    n_tokens = mask.sum()
    if reduction == "none":
        return LossOutput(smoothed.reshape(shape), nll.reshape(shape), n_tokens)
    loss, nll_sum = smoothed.sum(), nll.sum()
    if reduction == "mean":
        # Unlike F.cross_entropy (NaN), a batch with no targets gives 0.
        denom = n_tokens.clamp(min=1).to(loss.dtype)
        return LossOutput(loss / denom, nll_sum / denom, n_tokens)
    return LossOutput(loss, nll_sum, n_tokens)


def label_smoothed_cross_entropy(
    logits: Tensor,
    target: Tensor,
    *,
    epsilon: float = 0.1,
    ignore_index: int = -100,
    reduction: str = "sum",
) -> LossOutput:
    """Label-smoothed cross-entropy of ``logits (N, V)`` or ``(B, T, V)`` against
    ``target (N,)`` / ``(B, T)``; targets equal to ``ignore_index`` (pass the
    pad id) count for nothing. ``reduction``: ``"sum"`` (default: divide by
    the batch's token count yourself, as with gradient accumulation),
    ``"mean"`` over non-ignored tokens, or ``"none"``.
    """
    _check_options(epsilon, reduction)
    if logits.shape[:-1] != target.shape:
        raise ValueError(
            f"logits {tuple(logits.shape)} and target {tuple(target.shape)} disagree: "
            "expected logits (..., V) with target (...)"
        )
    vocab = logits.size(-1)
    smoothed, nll, mask = _token_losses(
        logits.reshape(-1, vocab), target.reshape(-1), epsilon, ignore_index
    )
    return _reduce(smoothed, nll, mask, reduction, target.shape)


def _chunk_losses(
    hidden: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    target: Tensor,
    epsilon: float,
    ignore_index: int,
) -> tuple[Tensor, Tensor]:
    # The chunk's (n, V) logits live only inside this function; under
    # checkpointing they are recomputed in backward rather than stored.
    smoothed, nll, _ = _token_losses(F.linear(hidden, weight, bias), target, epsilon, ignore_index)
    return smoothed, nll


def chunked_label_smoothed_cross_entropy(
    hidden: Tensor,
    weight: Tensor,
    target: Tensor,
    *,
    bias: Tensor | None = None,
    epsilon: float = 0.1,
    ignore_index: int = -100,
    reduction: str = "sum",
    chunk_size: int = 1024,
) -> LossOutput:
    """The loss of ``F.linear(hidden, weight, bias)`` without the full logits.

    ``hidden (N, D)`` (or ``(B, T, D)``), ``weight (V, D)``, ``bias (V,)``,
    ``target (N,)`` (or ``(B, T)``). Tokens are processed ``chunk_size`` at a
    time; each chunk's projection runs under ``torch.utils.checkpoint``, so at
    most one ``(chunk_size, V)`` fp32 logits block exists at once, in forward
    and in backward (where it is recomputed: one extra matmul). Value and
    gradients equal ``label_smoothed_cross_entropy(F.linear(hidden, weight, bias), ...)``
    up to float summation order.
    """
    _check_options(epsilon, reduction)
    if chunk_size < 1:
        raise UsageError(f"chunk_size: must be >= 1, got {chunk_size}")
    if hidden.shape[:-1] != target.shape or weight.dim() != 2 or weight.size(1) != hidden.size(-1):
        raise ValueError(
            f"hidden {tuple(hidden.shape)}, weight {tuple(weight.shape)} and target "
            f"{tuple(target.shape)} disagree: expected hidden (..., D), weight (V, D), target (...)"
        )
    flat_hidden = hidden.reshape(-1, hidden.size(-1))
    flat_target = target.reshape(-1)
    recompute = torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for t in (hidden, weight, bias)
    )
    smoothed_parts, nll_parts = [], []
    for start in range(0, flat_target.numel(), chunk_size):
        args = (
            flat_hidden[start : start + chunk_size],
            weight,
            bias,
            flat_target[start : start + chunk_size],
            epsilon,
            ignore_index,
        )
        if recompute:
            smoothed, nll = checkpoint(
                _chunk_losses, *args, use_reentrant=False, preserve_rng_state=False
            )
        else:
            smoothed, nll = _chunk_losses(*args)
        smoothed_parts.append(smoothed)
        nll_parts.append(nll)
    if not smoothed_parts:  # no tokens at all
        empty = flat_hidden.new_zeros(0, dtype=torch.float32)
        smoothed_parts, nll_parts = [empty], [empty]
    mask = flat_target != ignore_index
    return _reduce(torch.cat(smoothed_parts), torch.cat(nll_parts), mask, reduction, target.shape)
