"""Mixture-of-experts feed-forward layer: a router sends each token to k of N FFNs.

* Router: a bias-free linear map to N logits, softmax, top-k (Shazeer et al.,
  2017). For ``k > 1`` the k gates are renormalised to sum to 1 (Mixtral,
  Jiang et al., 2024); for ``k = 1`` the gate is the router probability itself
  (Switch Transformer, Fedus et al., 2022, §2.1), since a renormalised single
  gate would be 1 and the router would learn only from the auxiliary loss.
* Capacity (Switch §2.2; GShard, Lepikhin et al., 2021, Algorithm 1): expert
  ``i`` takes at most ``ceil(capacity_factor * tokens * k / N)`` assignments.
  First choices are served before second choices, each in token order; an
  assignment over capacity skips the expert and contributes nothing, so the
  token passes through the residual connection around this layer (its other
  experts still count, with their gates as they were). Dropped assignments
  are counted. ``capacity_factor=None`` drops nothing (Mixtral).
* Sparse dispatch: assignments are sorted by expert; each expert runs on the
  rows gathered for it; outputs are weighted by their gates and scatter-added
  back. Work is ``k`` FFN evaluations per token, not ``N``.
* Auxiliary losses, returned (not stored) in ``MoEAux`` for the trainer to add
  as ``weight * loss``:

  - load balancing (Switch eq. 4-6): ``N * sum_i f_i * P_i``, with ``f_i`` the
    fraction of the routed (token, expert) assignments that chose expert ``i``
    (before capacity; the top-k are counted, then divided by ``k``) and
    ``P_i`` the mean router probability of ``i``. It is 1 for uniform
    routing. (HF's Mixtral loss does not divide by ``k``: it is ``k`` times this.)
  - router z-loss (ST-MoE, Zoph et al., 2022, eq. 5): ``mean_t logsumexp(logits_t)^2``,
    keeping router logits small so the softmax stays stable in low precision.

Shapes: ``B`` batch, ``T`` length, ``D`` d_model, ``N`` experts, ``k`` top-k.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from attnkit.blocks.feedforward import FeedForward
from attnkit.roles import Roles, projection


@dataclass
class MoEAux:
    """What one MoE layer reports beside its output.

    Attributes:
        load_balancing_loss: scalar, ``N * sum_i f_i P_i`` (1 when balanced).
        z_loss: scalar, ``mean(logsumexp(router logits)^2)``.
        utilisation: ``(N,)`` fraction of routed assignments per expert (sums
            to 1; ``1 / N`` each when balanced), before capacity; detached.
        dropped: scalar long, assignments that went over capacity.
        assignments: routed assignments, ``tokens * k`` (for a drop rate).
    """

    load_balancing_loss: Tensor
    z_loss: Tensor
    utilisation: Tensor
    dropped: Tensor
    assignments: int

    @property
    def drop_rate(self) -> float:
        return float(self.dropped) / max(self.assignments, 1)


def merge_aux(auxes: list[MoEAux]) -> MoEAux | None:
    """``combine_aux`` of the reports, or ``None`` when there are none (no MoE layer)."""
    return combine_aux(auxes) if auxes else None


def combine_aux(auxes: list[MoEAux]) -> MoEAux:
    """Several layers' reports as one: mean losses and utilisation, summed drops."""
    if not auxes:
        raise ValueError("auxes: need at least one MoE layer's report")
    n = len(auxes)
    return MoEAux(
        load_balancing_loss=torch.stack([a.load_balancing_loss for a in auxes]).sum() / n,
        z_loss=torch.stack([a.z_loss for a in auxes]).sum() / n,
        utilisation=torch.stack([a.utilisation for a in auxes]).mean(0),
        dropped=torch.stack([a.dropped for a in auxes]).sum(),
        assignments=sum(a.assignments for a in auxes),
    )


class MoEFeedForward(nn.Module):
    """``(B, T, D) -> ((B, T, D), MoEAux)``: top-k routing over ``num_experts`` FFNs.

    Args:
        d_model, d_ff, activation: each expert's ``FeedForward``.
        num_experts: N.
        top_k: k (1 = Switch, 2 = Mixtral/GShard).
        capacity_factor: ``None`` for no limit, else the factor above (Switch
            trained with 1.0-1.25).
        normalize_gates: renormalise the k gates; default ``top_k > 1``.
        expert: makes one expert (default: ``FeedForward(d_model, d_ff, activation)``;
            e.g. a ``SwiGLU`` for Mixtral-style experts).
    """

    def __init__(
        self,
        d_model: int,
        d_ff: int,
        num_experts: int,
        top_k: int = 2,
        *,
        capacity_factor: float | None = None,
        activation: str = "relu",
        normalize_gates: bool | None = None,
        expert: Callable[[], nn.Module] | None = None,
    ):
        super().__init__()
        if num_experts < 1:
            raise ValueError(f"num_experts: must be >= 1, got {num_experts}")
        if not 1 <= top_k <= num_experts:
            raise ValueError(f"top_k: must be in 1..num_experts={num_experts}, got {top_k}")
        if capacity_factor is not None and capacity_factor <= 0:
            raise ValueError(f"capacity_factor: must be > 0 or None, got {capacity_factor}")
        self.num_experts, self.top_k = num_experts, top_k
        self.capacity_factor = capacity_factor
        self.normalize_gates = top_k > 1 if normalize_gates is None else normalize_gates
        self.router = nn.Linear(d_model, num_experts, bias=False)
        make = expert or (lambda: FeedForward(d_model, d_ff, activation))
        self.experts = nn.ModuleList(make() for _ in range(num_experts))

    def roles(self) -> Roles:
        """The router scores experts, it projects nothing; each expert declares its own."""
        return Roles((projection("router", "router"),))

    def capacity(self, tokens: int) -> int | None:
        """Assignments one expert may take for ``tokens`` routed tokens."""
        if self.capacity_factor is None:
            return None
        return math.ceil(self.capacity_factor * tokens * self.top_k / self.num_experts)

    def route(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Route tokens ``(n, D)``: ``(logits (n, N), probs, gates (n, k), experts (n, k))``.

        The softmax runs in at least fp32 (Switch §2.4, "selective precision").
        """
        logits = self.router(x)
        acc = torch.promote_types(logits.dtype, torch.float32)
        probs = torch.softmax(logits.to(acc), dim=-1)
        top, experts = probs.topk(self.top_k, dim=-1)
        gates = top / top.sum(-1, keepdim=True) if self.normalize_gates else top
        return logits, probs, gates, experts

    def forward(self, x: Tensor, mask: Tensor | None = None) -> tuple[Tensor, MoEAux]:
        """Route ``x`` ``(B, T, D)``; ``mask`` ``(B, T)`` True = real token (pads skip all).

        Returns ``(y (B, T, D), MoEAux)``; ``y`` is zero for padding and for a
        token whose every assignment was dropped (the residual carries it).
        """
        b, t, d = x.shape
        flat = x.reshape(b * t, d)
        rows = None
        if mask is not None:
            if mask.shape != (b, t) or mask.dtype != torch.bool:
                raise ValueError(f"mask: expected bool ({b}, {t}), got {tuple(mask.shape)}")
            rows = mask.reshape(-1).nonzero().squeeze(1)
            flat = flat.index_select(0, rows)
        n, k, e = flat.size(0), self.top_k, self.num_experts
        logits, probs, gates, experts = self.route(flat)

        # Slot-major order (every first choice, then every second, ...), then a
        # stable sort by expert: inside an expert, first choices come first.
        expert_of = experts.t().reshape(-1)  # (k n,)
        token_of = torch.arange(n, device=x.device).repeat(k)
        gate_of = gates.t().reshape(-1)
        order = torch.sort(expert_of, stable=True).indices
        expert_of, token_of, gate_of = expert_of[order], token_of[order], gate_of[order]
        counts = torch.bincount(expert_of, minlength=e)
        starts = counts.cumsum(0) - counts
        rank = torch.arange(k * n, device=x.device) - starts[expert_of]
        cap = self.capacity(n)
        kept = torch.ones_like(rank, dtype=torch.bool) if cap is None else rank < cap
        dropped = (~kept).sum()

        out = torch.zeros_like(flat)
        kept_counts = counts if cap is None else counts.clamp(max=cap)
        for i, (start, size) in enumerate(zip(starts.tolist(), kept_counts.tolist())):
            if size == 0:
                continue
            tok = token_of[start : start + size]  # capacity keeps the first `size` of each group
            y = self.experts[i](flat.index_select(0, tok))
            out.index_add_(0, tok, y * gate_of[start : start + size, None].to(y.dtype))

        if rows is not None:
            out = torch.zeros_like(x.reshape(b * t, d)).index_copy(0, rows, out)
        f = counts.to(probs.dtype) / max(k * n, 1)
        p = probs.mean(0) if n else probs.new_zeros(e)
        z = torch.logsumexp(logits.to(probs.dtype), dim=-1).square()
        aux = MoEAux(
            load_balancing_loss=e * (f * p).sum(),
            z_loss=z.mean() if n else z.sum(),
            utilisation=f.detach(),
            dropped=dropped,
            assignments=k * n,
        )
        return out.reshape(b, t, d), aux
