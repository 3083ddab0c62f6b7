"""What greedy search, sampling and beam search share.

* the result types (``Hypothesis``, ``DecodeResult``);
* option checks that raise ``UsageError`` naming the option;
* per-sentence output length limits from the source (``max_len_a * src_len +
  max_len_b``, by default source length + 50, optionally capped by ``max_len``);
* the GNMT length penalty;
* ``decode_loop``: one batched loop over time steps for searches that pick one
  token per sentence per step (greedy is sampling with an argmax picker);
* ``SearchSettings``: how often the searches stop to ask the device whether
  every sentence has finished, and whether a host sync is free. They depend on
  the device, so the inference plan decides them (``attnkit.inference``) and
  hands them in; a search never looks at the device itself.

Host-device syncs: a search's loop runs on the device without reading any
value back, except the "all finished?" test, made every ``check_every``
steps. On a GPU each test stalls the host until the device has caught up, so
the host can no longer queue the next step's kernels ahead; asking every 8
steps (the plan's setting on accelerators) removes 7 of 8 stalls, at the price
of up to 7 extra steps after the last sentence finished (their outputs are
discarded: finished sentences are frozen, so results never change). On CPU
there is nothing to overlap, and the default ``SearchSettings()`` (the CPU's)
asks every step.

Length convention: a sentence's limit counts the tokens *generated*, EOS
included. An output that hits the limit without EOS is cut there (it has
``limit`` tokens and its score has no EOS term); one that ends with EOS has at
most ``limit - 1`` tokens. Scores are sums of the model's log-probabilities of
the generated tokens (EOS included when generated).

Shapes: ``B`` sentences, ``S`` source length, ``V`` target vocabulary, ``T``
the longest limit in the batch.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from attnkit.decoding.protocol import AnyStepper
from attnkit.errors import UsageError


@dataclass(frozen=True)
class SearchSettings:
    """What a search does differently by device, decided by the inference plan.

    Attributes:
        check_every: steps between the "all finished?" host syncs (``0``: never
            ask, run to the length bound).
        sync_free: a host sync costs nothing here (the CPU), so beam search
            updates the finished pool only for the sentences that finish
            something; otherwise every sentence's pool every step, sync-free.
    The defaults are the CPU's.
    """

    check_every: int = 1
    sync_free: bool = True


class Hypothesis(NamedTuple):
    """One output: token ids (no BOS, no EOS) and its summed log-probability."""

    tokens: list[int]
    score: float


@dataclass
class DecodeResult:
    """Decoded outputs of a batch, one entry per source sentence.

    Attributes:
        tokens: the best output of each sentence (no BOS, no EOS).
        scores: its sum of log-probabilities (EOS included when generated).
        nbest: each sentence's hypotheses, best first (one for greedy/sampling;
            up to ``nbest`` for beam search, ranked by length-penalised score).
    """

    tokens: list[list[int]]
    scores: list[float]
    nbest: list[list[Hypothesis]]

    @classmethod
    def from_nbest(cls, nbest: list[list[Hypothesis]]) -> DecodeResult:
        best = [hyps[0] if hyps else Hypothesis([], -math.inf) for hyps in nbest]
        return cls([h.tokens for h in best], [h.score for h in best], nbest)


# -- option checks -----------------------------------------------------------------


def check_src(src_ids: Tensor) -> None:
    if not isinstance(src_ids, Tensor) or src_ids.dim() != 2:
        shape = tuple(src_ids.shape) if isinstance(src_ids, Tensor) else type(src_ids).__name__
        raise UsageError(f"src_ids must be a (batch, length) tensor of token ids, got {shape}")
    if src_ids.dtype not in (torch.long, torch.int32, torch.int64):
        raise UsageError(f"src_ids must hold integer token ids, got dtype {src_ids.dtype}")


def check_int(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise UsageError(f"{name} must be an integer >= {minimum}, got {value!r}")


def resolve_check_every(check_every: int | None, search: SearchSettings | None) -> int:
    """``check_every`` as given (>= 0), else ``search``'s (default: ``SearchSettings()``)."""
    if check_every is None:
        check_every = (search or SearchSettings()).check_every
    check_int("check_every", check_every, 0)
    return check_every


def check_float(name: str, value: object, low: float, high: float, *, open_low: bool) -> None:
    """``value`` must be a finite number in ``(low, high]`` or ``[low, high]``."""
    ok = False
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        ok = (value > low if open_low else value >= low) and value <= high
    if not ok:
        bracket = "(" if open_low else "["
        upper = "inf)" if math.isinf(high) else f"{high:g}]"
        raise UsageError(f"{name} must be in {bracket}{low:g}, {upper}, got {value!r}")


# -- length limits and length penalty ----------------------------------------------


def output_limits(
    src_ids: Tensor,
    pad_id: int,
    *,
    max_len_a: float = 1.0,
    max_len_b: int = 50,
    max_len: int | None = None,
) -> tuple[Tensor, int]:
    """Per-sentence limits ``(B,)`` on generated tokens, and an upper bound ``T`` on them.

    A sentence's limit is ``floor(max_len_a * src_len + max_len_b)``, where
    ``src_len`` counts its non-pad tokens, capped at ``max_len`` and at least 1.
    ``T`` comes from the padded width, so finding it needs no host-device sync.
    """
    check_src(src_ids)
    check_float("max_len_a", max_len_a, 0.0, math.inf, open_low=False)
    if isinstance(max_len_b, bool) or not isinstance(max_len_b, int):
        raise UsageError(f"max_len_b must be an integer, got {max_len_b!r}")
    if max_len is not None:
        check_int("max_len", max_len, 1)
    cap = max_len if max_len is not None else math.inf
    src_len = (src_ids != pad_id).sum(dim=1)
    limits = torch.floor(src_len.double() * max_len_a + max_len_b).long()
    limits = limits.clamp(min=1, max=None if max_len is None else max_len)
    bound = int(max(1, min(cap, math.floor(max_len_a * src_ids.size(1) + max_len_b))))
    return limits, bound


def length_penalty(length: int | Tensor, alpha: float) -> float | Tensor:
    """GNMT's ``lp(Y) = ((5 + |Y|) / 6) ** alpha`` (Wu et al., 2016, eq. 14).

    ``|Y|`` is the number of scored tokens (EOS included when generated);
    hypotheses are ranked by ``score / lp``. ``alpha = 0`` gives 1 (raw sums).
    """
    return ((5 + length) / 6) ** alpha


def log_probs(logits: Tensor) -> Tensor:
    """Log-softmax in at least float32 (float64 logits stay float64)."""
    dtype = torch.promote_types(logits.dtype, torch.float32)
    return torch.log_softmax(logits.to(dtype), dim=-1)


# -- the one-token-per-step loop ---------------------------------------------------

Picker = Callable[[Tensor, Tensor], Tensor]
"""``pick(logits (B, V), log_probs (B, V)) -> tokens (B,)``."""


def decode_loop(
    model: AnyStepper,
    src_ids: Tensor,
    pick: Picker,
    *,
    max_len_a: float,
    max_len_b: int,
    max_len: int | None,
    check_every: int | None,
    search: SearchSettings | None = None,
) -> DecodeResult:
    """Feed BOS, then each picked token, until every sentence has EOS or hits its limit.

    Finished sentences keep being fed (``pad_id``) but their outputs and scores
    no longer change. Every ``check_every`` steps one host-device sync asks
    whether all sentences have finished (``0``: never ask, run ``T`` steps;
    ``None``: ``search``'s).
    """
    limits, bound = output_limits(
        src_ids, model.pad_id, max_len_a=max_len_a, max_len_b=max_len_b, max_len=max_len
    )
    batch, device = src_ids.size(0), src_ids.device
    check_every = resolve_check_every(check_every, search)
    limits = limits.to(device)
    state = model.start(src_ids, max_steps=bound)
    tokens = torch.full((batch,), model.bos_id, dtype=torch.long, device=device)
    out = torch.full((batch, bound), model.pad_id, dtype=torch.long, device=device)
    lengths = torch.zeros(batch, dtype=torch.long, device=device)  # generated, EOS included
    ended_eos = torch.zeros(batch, dtype=torch.bool, device=device)
    finished = torch.zeros(batch, dtype=torch.bool, device=device)
    scores: Tensor | None = None
    for t in range(bound):
        logits, state = model.step(tokens, state)
        logp = log_probs(logits)
        if scores is None:
            scores = logp.new_zeros(batch)
        picked = pick(logits, logp)
        active = ~finished
        token_logp = logp.gather(1, picked[:, None]).squeeze(1)
        scores = scores + torch.where(active, token_logp, torch.zeros_like(token_logp))
        picked = torch.where(active, picked, torch.full_like(picked, model.pad_id))
        out[:, t] = picked
        lengths += active.long()
        is_eos = active & (picked == model.eos_id)
        ended_eos |= is_eos
        finished = finished | is_eos | (limits <= t + 1)
        tokens = picked
        if check_every and (t + 1) % check_every == 0 and bool(finished.all()):
            break
    assert scores is not None  # bound >= 1, so the loop ran at least once
    keep = (lengths - ended_eos.long()).tolist()
    rows, score_list = out.tolist(), scores.tolist()
    return DecodeResult.from_nbest(
        [[Hypothesis(row[:n], s)] for row, n, s in zip(rows, keep, score_list)]
    )
