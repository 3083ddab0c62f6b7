"""Activation-aware int4 weights (AWQ: Lin et al., 2023, simplified) for ``"int4"``.

``quantize_model(model, "int4", calibrate=...)`` calls ``apply_awq`` on the
float model before rounding it to int4 (``attnkit.quantize.int4``, RTN in
groups). RTN gives each group of weights of a row one scale, set by the
group's extremes, and the rounding error of a weight is multiplied by its input:
the few input channels of a Llama-type model whose activations are 10-100x
the others carry most of the output's error. AWQ scales input channel ``j``
of a weight by ``s_j`` before rounding and the input by ``1 / s_j``:

    x W^T = (x / s) (W diag(s))^T,   s_j = mean|x_j| ** alpha / sqrt(max_j(.) min_j(.))

so the weights that meet large inputs get finer levels. ``alpha`` is searched
per group of linears (``ALPHAS``; 0 is plain RTN) for the smallest
``||X W^T - (X / s) Q(W diag(s))^T||`` on the calibration inputs ``X`` (``Q``:
``quantize_groups``' rounding, its bf16 scales included). The ``1 / s`` is
folded exactly into the float weights before rounding, so nothing extra runs
at inference and an int4 checkpoint or a GGUF export holds the result:

* into the norm whose output the linears read (attention's fused q/k/v, a
  gated FFN's gate and up): its declared ``norm`` parameters (``attnkit.roles``)
  divided by ``s``. Which norm feeds which linears is traced during
  calibration: a linear whose input *is* the tensor a declaring norm returned;
  all the linears reading it are scaled together, with one ``s``;
* into a gated FFN's ``ffn_in`` rows for its ``ffn_out`` (the declared roles
  of ``down(act(gate x) * up x)``: dividing up's output ``j`` divides down's
  input ``j``);
* into attention's ``v`` rows for its ``o`` projection, whose inputs are the
  values mixed per head: one factor per value channel (the mean ``|x|`` over
  the query heads that share it, with grouped-query attention), so the module
  must say its ``head_dim``.

Nothing runs at inference time (a run-time multiply before the int4 product
would need a tensor that GGUF cannot hold). Clipping (AWQ's second step),
for every int4 linear calibration reached: per row and group the range
shrinks by the ratio of ``CLIP_RATIOS`` with the smallest output error on the
calibration inputs.

Exactness is checked, not assumed: after folding, calibration runs again and
every recorded linear must see the inputs it saw before (divided by its
``s``); where it does not (a post-norm model, whose norm output is also the
residual stream), the norm folds are undone (then the value folds, then the
FFN folds) until it does. A linear
whose weight is shared with another module (a tied output projection) is
never scaled or clipped.

Shapes: ``N`` a linear's outputs, ``K`` its inputs, ``R`` calibration rows
(the first ``MAX_ROWS`` a linear saw).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from attnkit.quantize.int4 import dequantize_groups, fitting_group, quantize_groups
from attnkit.quantize.smooth import record_inputs
from attnkit.roles import declaration, declared_projections

ALPHAS = tuple(i / 10 for i in range(11))
"""The exponents searched for ``s = mean|x| ** alpha`` (0: RTN's own weights)."""
CLIP_RATIOS = (1.0, 0.95, 0.9, 0.85, 0.8, 0.75, 0.7)
"""The fractions of a group's range tried by the clipping search (1.0: no clipping)."""
MAX_ROWS = 512
"""Calibration rows kept per linear for the searches (the mean |x| uses every row)."""
MAX_NORM_OUTPUTS = 1024
"""Norm outputs kept per forward for tracing which linears read them."""
EXACT_TOLERANCE = 1e-3
"""Folding leaves each linear's inputs, divided by its ``s``, within this share of their
maximum (fp32 rounding: ~1e-6); a larger change means a fold was not exact."""
AWQ_ENV = "ATTNKIT_INT4_AWQ"


def awq_from_env() -> bool:
    """Whether ``--precision int4`` calibrates a language model (``ATTNKIT_INT4_AWQ=1``;
    unset or anything else: plain round-to-nearest). Off by default because on
    SmolLM2-135M it measured no gain: next-token agreement with fp32 90.9% against RTN's
    91.1% (10 prompts x 128 positions, bench/int4_agreement.py, bench/NOTES.md), for
    ~12 s of calibration."""
    return os.environ.get(AWQ_ENV, "").strip() == "1"


@dataclass
class _Inputs:
    """What calibration recorded of one linear's inputs."""

    rows: list[Tensor] = field(default_factory=list)  # (r, K) fp32, MAX_ROWS in all
    kept: int = 0
    count: int = 0
    abs_sum: Tensor | None = None  # (K,)

    def add(self, x: Tensor) -> None:
        x = x.detach().float().reshape(-1, x.size(-1))
        if self.kept < MAX_ROWS:
            self.rows.append(x[: MAX_ROWS - self.kept].clone())
            self.kept += self.rows[-1].size(0)
        part = x.abs().sum(0)
        self.abs_sum = part if self.abs_sum is None else self.abs_sum + part
        self.count += x.size(0)

    def sample(self) -> Tensor:
        """``(R, K)``: the first rows seen."""
        return torch.cat(self.rows)

    def mean_abs(self) -> Tensor:
        """``mean|x_j|`` ``(K,)`` over every row seen."""
        assert self.abs_sum is not None
        return self.abs_sum / max(self.count, 1)


def _norm_parameters(module: nn.Module) -> list[nn.Parameter]:
    """A module's declared ``norm`` parameters (weight, and bias if any), if it declares
    a 1-D ``weight`` as one; else ``[]``."""
    roles = declaration(module)
    if roles is None or roles.parameters.get("weight") != "norm":
        return []
    own = dict(module.named_parameters(recurse=False))
    params = [own[name] for name, kind in roles.parameters.items()
              if kind == "norm" and name in own]  # fmt: skip
    return params if all(p.dim() == 1 for p in params) else []


_UNKNOWN = object()  # a linear fed by different tensors in different calls: no norm to fold


def _calibrate(
    model: nn.Module, linears: Sequence[nn.Linear], run: Callable[[nn.Module], object]
) -> tuple[dict[int, _Inputs], dict[int, object]]:
    """Each linear's recorded inputs, and the norm module each was fed by (``None``: not
    a norm's output; ``_UNKNOWN``: differently in different calls), keyed by ``id``."""
    norms = [m for m in model.modules() if _norm_parameters(m)]
    # The norm outputs of the current forward, kept alive so that no other tensor can
    # take an id of theirs (an encoder's last norm feeds every cross-attention).
    recent: list[tuple[nn.Module, Tensor]] = []
    inputs: dict[int, _Inputs] = {}
    fed_by: dict[int, object] = {}

    def on_norm(module: nn.Module, args: tuple[Tensor, ...], output: Tensor) -> None:
        recent.append((module, output))
        del recent[:-MAX_NORM_OUTPUTS]

    def record(linear: nn.Module, x: Tensor) -> None:
        source = next((norm for norm, out in reversed(recent) if out is x), None)
        key = id(linear)
        fed_by[key] = source if fed_by.get(key, source) is source else _UNKNOWN
        inputs.setdefault(key, _Inputs()).add(x)

    def traced(m: nn.Module) -> None:
        handles = [norm.register_forward_hook(on_norm) for norm in norms]
        handles.append(m.register_forward_pre_hook(lambda *_: recent.clear()))
        try:
            run(m)
        finally:
            for handle in handles:
                handle.remove()
            recent.clear()

    record_inputs(model, linears, traced, record)
    return inputs, fed_by


def awq_scales(weights: Sequence[Tensor], x: Tensor, mean_abs: Tensor, group_size: int) -> Tensor:
    """The ``s`` ``(K,)`` for linears reading the same input ``x`` ``(R, K)`` (weights
    ``(N_i, K)``): of ``mean_abs ** alpha`` (normalised) over ``ALPHAS``, the one with the
    smallest summed squared output error after rounding in groups of ``group_size``."""
    w = torch.cat([weight.detach().float() for weight in weights])
    ref = x @ w.t()
    base = mean_abs.float().clamp(min=1e-6)
    best_error, best = float("inf"), torch.ones_like(base)
    for alpha in ALPHAS:
        s = base.pow(alpha)
        s = s / (s.max() * s.min()).sqrt()
        rounded = dequantize_groups(*quantize_groups(w * s, group_size)) / s
        error = float((x @ rounded.t() - ref).pow(2).sum())
        if error < best_error:
            best_error, best = error, s
    return best


def clip_weight(weight: Tensor, x: Tensor, group_size: int) -> Tensor:
    """``weight`` ``(N, K)`` with each row's group clamped to the share of its range (of
    ``CLIP_RATIOS``) whose rounding gives the smallest output error on ``x`` ``(R, K)``."""
    n, k = weight.shape
    groups = k // group_size
    w = weight.detach().float().reshape(n, groups, group_size)
    xg = x.float().reshape(-1, groups, group_size).transpose(0, 1)  # (G, R, g)
    cov = xg.transpose(1, 2) @ xg  # (G, g, g): error of a group = d cov d^T
    lo, hi = w.amin(-1, keepdim=True), w.amax(-1, keepdim=True)
    best, best_error = w, torch.full((groups, n), float("inf"))
    for ratio in CLIP_RATIOS:
        clipped = torch.minimum(torch.maximum(w, lo * ratio), hi * ratio)
        rounded = dequantize_groups(*quantize_groups(clipped.reshape(n, k), group_size))
        d = (rounded.reshape(n, groups, group_size) - w).transpose(0, 1)  # (G, N, g)
        error = ((d @ cov) * d).sum(-1)  # (G, N)
        better = error < best_error
        best_error = torch.where(better, error, best_error)
        best = torch.where(better.t()[..., None], clipped, best)
    return best.reshape(n, k)


@dataclass
class _Fold:
    """One exact fold: ``consumers``' weight columns times ``s``, and the source of their
    input divided by it: a norm's parameters (``norm``), or the output rows
    ``start:start+len(row_s)`` of the linear ``rows_of`` divided by ``row_s`` (an FFN's
    up projection: ``row_s`` is ``s``; attention's values, whose rows each feed the
    output projection's inputs of the query heads sharing them)."""

    s: Tensor
    consumers: list[nn.Linear]
    norm: list[nn.Parameter] = field(default_factory=list)
    rows_of: nn.Linear | None = None
    start: int = 0
    row_s: Tensor | None = None

    def apply(self, inverse: bool = False) -> None:
        """Fold ``s`` in; ``inverse``: take it out again (the opposite operations, so that
        the weights come back to the last bit where the dtype is wider than ``s``'s)."""
        times, over = (Tensor.div_, Tensor.mul_) if inverse else (Tensor.mul_, Tensor.div_)
        for linear in self.consumers:
            times(linear.weight, self.s)
        for param in self.norm:
            over(param, self.s)
        if self.rows_of is not None:
            row_s = self.s if self.row_s is None else self.row_s
            stop = self.start + row_s.numel()
            over(self.rows_of.weight[self.start : stop], row_s[:, None])
            if self.rows_of.bias is not None:
                over(self.rows_of.bias[self.start : stop], row_s)


def _by_declarer(model: nn.Module) -> list[tuple[nn.Module, dict[str, tuple[nn.Module, int, int]]]]:
    """Per declaring module: role -> (its linear, first row, row past the last)."""
    found: dict[int, tuple[nn.Module, dict[str, tuple[nn.Module, int, int]]]] = {}
    for proj in declared_projections(model):
        linear = getattr(proj.owner, proj.attribute)
        roles = found.setdefault(id(proj.declared_by), (proj.declared_by, {}))[1]
        for role, (first, stop) in proj.rows.items():
            roles[role] = (linear, first, stop)
    return list(found.values())


def _ffn_pairs(model: nn.Module) -> list[tuple[nn.Linear, nn.Linear]]:
    """``(ffn_in, ffn_out)`` of every declared gated FFN (``ffn_gate``, ``ffn_in`` and
    ``ffn_out`` declared by one module, each a whole linear)."""
    pairs = []
    for _, roles in _by_declarer(model):
        if "ffn_gate" in roles and "ffn_in" in roles and "ffn_out" in roles:
            (up, first, stop), (down, *_) = roles["ffn_in"], roles["ffn_out"]
            if not (isinstance(up, nn.Linear) and isinstance(down, nn.Linear)):
                continue
            if first == 0 and stop == up.out_features == down.in_features:
                pairs.append((up, down))
    return pairs


def _value_pairs(model: nn.Module) -> list[tuple[nn.Linear, int, int, nn.Linear, int]]:
    """``(values' linear, first row, stop, output projection, head size)`` of every
    declared attention whose ``o`` reads its ``v`` heads (``head_dim`` its attribute;
    query head ``h`` of ``H`` reads value head ``h // (H / H_kv)``: grouped queries).
    The fold is checked like every other (module doc), so a wrong guess is undone."""
    pairs = []
    for module, roles in _by_declarer(model):
        head = getattr(module, "head_dim", None)
        if "v" not in roles or "o" not in roles or not isinstance(head, int) or head < 1:
            continue
        (values, first, stop), (out, *_) = roles["v"], roles["o"]
        width = stop - first
        if not (isinstance(values, nn.Linear) and isinstance(out, nn.Linear)):
            continue
        if width % head == 0 and out.in_features % width == 0:
            pairs.append((values, first, stop, out, head))
    return pairs


def _shared_weights(model: nn.Module) -> set[int]:
    """``id``s of parameters that more than one module holds (tied weights)."""
    holders: dict[int, int] = {}
    for module in model.modules():
        for param in module.parameters(recurse=False):
            holders[id(param)] = holders.get(id(param), 0) + 1
    return {key for key, count in holders.items() if count > 1}


def _exact(
    model: nn.Module,
    linears: Sequence[nn.Linear],
    run: Callable[[nn.Module], object],
    before: dict[int, _Inputs],
    folds: Sequence[_Fold],
) -> dict[int, _Inputs] | None:
    """The inputs recorded again, if every linear's are its inputs ``before`` divided by
    its ``s``; else ``None``."""
    scale = {id(linear): fold.s for fold in folds for linear in fold.consumers}
    after, _ = _calibrate(model, linears, run)
    for key, old in before.items():
        expected = old.sample() / scale.get(key, 1.0)
        new = after[key].sample() if key in after else None
        if new is None or new.shape != expected.shape:
            return None
        if float((new - expected).abs().max()) > EXACT_TOLERANCE * float(expected.abs().max()):
            return None
    return after


@torch.no_grad()
def apply_awq(
    model: nn.Module,
    calibrate: Callable[[nn.Module], object],
    linears: Sequence[nn.Linear],
    group_size: int,
    *,
    clip: bool = True,
) -> int:
    """Fold activation-aware scales into ``model``'s float weights in place (module doc),
    then (``clip``) clip the ranges; returns how many linears were scaled.

    ``linears``: those that will become int4 (``quantize_model``'s convertible ones);
    only those the int4 kernel takes at ``group_size`` are touched. With
    ``clip=False`` the float model computes the same function as before (to fp32
    rounding)."""
    shared = _shared_weights(model)
    group_of = {
        id(lin): g
        for lin in linears
        if type(lin) is nn.Linear and id(lin.weight) not in shared
        and (g := fitting_group(lin.in_features, lin.out_features, group_size)) is not None
    }  # fmt: skip
    # Every linear is traced (a router too, which stays float): a norm is folded only
    # when all the linears reading it can take its scales.
    every = list({id(m): m for m in [*linears, *model.modules()] if type(m) is nn.Linear}.values())
    inputs, fed_by = _calibrate(model, every, calibrate)
    usable = {key for key in group_of if key in inputs}
    by_id = {id(lin): lin for lin in every}

    tiers: list[list[_Fold]] = [[], [], []]  # FFN, values, norms: undone last first
    for up, down in _ffn_pairs(model):
        if id(down) in usable and id(up.weight) not in shared:
            x = inputs[id(down)]
            s = awq_scales([down.weight], x.sample(), x.mean_abs(), group_of[id(down)])
            tiers[0].append(_Fold(s, [down], rows_of=up))
    for values, first, stop, out, head in _value_pairs(model):
        if id(out) in usable and id(values.weight) not in shared:
            x = inputs[id(out)]
            kv_heads, repeat = (stop - first) // head, out.in_features // (stop - first)
            # one factor per value channel: the mean over the query heads reading it
            base = x.mean_abs().reshape(kv_heads, repeat, head).mean(1, keepdim=True)
            base = base.expand(kv_heads, repeat, head).reshape(-1)
            s = awq_scales([out.weight], x.sample(), base, group_of[id(out)])
            row_s = s.reshape(kv_heads, repeat, head)[:, 0].reshape(-1)
            tiers[1].append(_Fold(s, [out], rows_of=values, start=first, row_s=row_s))
    for fold in tiers[0] + tiers[1]:
        fold.apply()
    readers: dict[int, list[nn.Linear]] = {}
    norms: dict[int, nn.Module] = {}
    for key, source in fed_by.items():
        if isinstance(source, nn.Module):
            readers.setdefault(id(source), []).append(by_id[key])
            norms[id(source)] = source
    for norm_id, group in readers.items():
        params = _norm_parameters(norms[norm_id])
        width = group[0].in_features
        if any(id(lin) not in usable for lin in group) or params[0].numel() != width:
            continue
        x, g = inputs[id(group[0])], group_of[id(group[0])]
        s = awq_scales([lin.weight for lin in group], x.sample(), x.mean_abs(), g)
        tiers[2].append(_Fold(s, group, norm=params))
        tiers[2][-1].apply()

    after = _exact(model, every, calibrate, inputs, [f for tier in tiers for f in tier])
    for undo in (2, 1, 0):  # not exact (a post-norm's output is also the stream): undo
        if after is not None:
            break
        for fold in tiers[undo]:
            fold.apply(inverse=True)
        tiers[undo] = []
        after = _exact(model, every, calibrate, inputs, [f for tier in tiers for f in tier])
    after = inputs if after is None else after
    if clip:
        for key in usable:
            linear = by_id[key]
            clipped = clip_weight(linear.weight, after[key].sample(), group_of[key])
            linear.weight.copy_(clipped)
    return sum(len(fold.consumers) for tier in tiers for fold in tier)
