"""``quantize_model``: a model's float linears swapped for packed fp32/bf16 or int8 ones (CPU).

Precisions (``PRECISIONS``):

* ``"fp32"``: every ``nn.Linear`` becomes a oneDNN-prepacked fp32
  ``PackedLinear`` (the same products summed in another order, ~2x the GEMM
  rate of MKL's sgemm on this AMD CPU: ``bench/NOTES.md``);
* ``"bf16"``: ``PackedLinear(precision="bf16")``; token embeddings in bf16;
* ``"int8"``: ``Int8Linear`` (per-channel int8 weights, dynamic activations);
  token embeddings int8 per row. With ``calibrate`` (a function that runs the
  float model on typical inputs), SmoothQuant first moves each linear's
  activation outliers into its weight (``attnkit.quantize.smooth``), and a
  gated FFN's down projection (``SwiGLU.down_proj``), whose input is the
  product of two projections and keeps outliers that smoothing cannot move,
  gets int8 weights with bf16 activations (``int8w``) instead: int8 made
  accurate on Llama-type models (on SmolLM2, fp32's top-1 at 120 -> 122 of 128
  positions, median logit error 6.0% -> 4.8%, for 3% of the decode rate:
  docs/lab/results-history.md, round 11);
* ``"int8w"``: ``Int8WeightOnlyLinear`` (the same int8 weights, bf16
  activations: accurate where activations have outliers, as in Llama-type
  models); token embeddings int8 per row.
* ``"int4"``: ``Int4Linear`` (4-bit group-wise RTN weights, bf16 activations,
  ``attnkit.quantize.int4``; group size ``group_size`` or ``ATTNKIT_INT4_GROUP``,
  default 32); a linear the int4 kernel cannot take (output count not a
  multiple of 16, input width not a multiple of 32) becomes ``int8w``; token
  embeddings int8 per row. With ``calibrate``, activation-aware scales (AWQ,
  ``attnkit.quantize.awq``) are folded into the norms and weights first.

Its attention modules get the CPU decode backend (``OneQueryDecode``: a
decode step's one query per row as two batched GEMVs). The residual stream,
norms, softmax and attention stay fp32; so do the
layers that decide rather than transform (a mixture-of-experts router, the
small matrices of a learned attention score). A ReLU right after an FFN's
first linear is fused into it. The model is converted **in place** (and
returned) for inference: every forward, ``start``/``step`` and the searches
keep working, and its ``state_dict`` keeps the float model's names (int8
linears store ``weight_int8`` + ``weight_scale`` instead of ``weight``).

Every conversion replaces a module by another (``setattr`` on its parent);
no module changes class. Cross-attention's ``q_proj`` and ``kv_proj`` are
linears like any other (``attnkit.attention.cross``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from attnkit.attention.backends import use_backend
from attnkit.attention.one_query import OneQueryDecode
from attnkit.attention.scores import Score
from attnkit.blocks.feedforward import FeedForward
from attnkit.blocks.moe import MoEFeedForward
from attnkit.blocks.swiglu import SwiGLU
from attnkit.kernels import torch_ops
from attnkit.models.embeddings import TokenEmbedding
from attnkit.quantize.awq import apply_awq
from attnkit.quantize.int4 import GROUP_SIZES, Int4Linear, fitting_group, group_size_from_env
from attnkit.quantize.int8_blocks import Int8BlockLinear
from attnkit.quantize.linear import Bf16Linear, Int8Linear, PackedLinear, quantize_rows
from attnkit.quantize.smooth import DEFAULT_ALPHA, input_maxima, smoothing_factors
from attnkit.quantize.weight_only import Int8WeightOnlyLinear

PRECISIONS = ("fp32", "bf16", "int8", "int8w", "int4")


class QuantizedTokenEmbedding(nn.Module):
    """``TokenEmbedding`` with bf16 rows, or int8 rows and a per-row fp32 scale; fp32 out."""

    weight_int8: Tensor
    row_scale: Tensor
    weight_bf16: Tensor

    def __init__(self, embedding: TokenEmbedding, precision: str) -> None:
        super().__init__()
        w = embedding.weight.detach()
        self.scale = embedding.scale
        self.precision = precision
        if precision == "int8":
            q, row_scale = quantize_rows(w)
            self.register_buffer("weight_int8", q)
            self.register_buffer("row_scale", row_scale)
        else:
            self.register_buffer("weight_bf16", w.to(torch.bfloat16))

    def forward(self, ids: Tensor) -> Tensor:
        """``ids`` ``(B, T)`` -> ``(B, T, D)`` fp32, times the embedding's scale."""
        if self.precision == "int8":
            rows = nn.functional.embedding(ids, self.weight_int8).float()
            return rows * (nn.functional.embedding(ids, self.row_scale[:, None]) * self.scale)
        return nn.functional.embedding(ids, self.weight_bf16).float() * self.scale


# The input widths torch 2.13's CPU weight-only int8 kernel handles (measured: 16, 32,
# 48, 64 work; 4, 8, 12, 20, 24 end the process).
INT8PACK_K_MULTIPLE = 16


def _convert(
    weight: Tensor,
    bias: Tensor | None,
    precision: str,
    activation: str = "none",
    smooth: Tensor | None = None,
    group_size: int = 0,
) -> nn.Module:
    if precision == "int4":
        group = fitting_group(weight.size(1), weight.size(0), group_size)
        if group is not None:
            return Int4Linear(weight, bias, group_size=group, activation=activation)
        precision = "int8w"  # a shape the int4 kernel cannot take: int8 weights instead
    if precision == "int8":
        return Int8Linear(weight, bias, activation=activation, smooth=smooth)
    if precision == "int8w":
        if weight.size(1) % INT8PACK_K_MULTIPLE:
            # torch's _weight_int8pack_mm crashes the process (SIGSEGV) on other widths
            # (a Swin patch projection of 2x2x1 pixels has 4): the same int8 weights,
            # with per-call int8 activations, instead.
            return Int8Linear(weight, bias, activation=activation, smooth=smooth)
        return Int8WeightOnlyLinear(weight, bias, activation=activation)  # needs no smoothing
    if precision == "bf16-plain":
        return Bf16Linear(weight, bias, activation=activation)
    return PackedLinear(weight, bias, precision=precision, activation=activation)


def _linear(
    linear: nn.Linear,
    precision: str,
    activation: str = "none",
    smooth: Tensor | None = None,
    group_size: int = 0,
) -> nn.Module:
    return _convert(linear.weight, linear.bias, precision, activation, smooth, group_size)


def _identity(x: Tensor) -> Tensor:
    return x


def convertible_linears(model: nn.Module) -> list[nn.Linear]:
    """The ``nn.Linear`` modules ``quantize_model`` converts, in module order, each once.

    Routers and the small matrices of a learned attention score stay float: they
    decide rather than transform.
    """
    keep_float = {
        id(m)
        for owner in model.modules()
        if isinstance(owner, Score | MoEFeedForward)
        for m in (owner.modules() if isinstance(owner, Score) else [owner.router])
    }
    seen: set[int] = set()
    found: list[nn.Linear] = []
    for module in model.modules():
        if type(module) is nn.Linear and id(module) not in keep_float | seen:
            seen.add(id(module))
            found.append(module)
    return found


@torch.no_grad()
def quantize_model(
    model: nn.Module,
    precision: str,
    *,
    pack_fp32: bool = True,
    calibrate: Callable[[nn.Module], object] | None = None,
    alpha: float = DEFAULT_ALPHA,
    group_size: int | None = None,
) -> nn.Module:
    """Convert ``model``'s linears (and embeddings for bf16/int8) in place; returns it in eval mode.

    Works on every family (``attnkit.models.FAMILIES``): whatever is an
    ``nn.Linear`` is converted, except routers and score matrices
    (``convertible_linears``). ``pack_fp32=False`` keeps the float linears
    unpacked: fp32 ones as they are (MKL's sgemm), for a machine where they are
    the faster (``attnkit.kernels.fp32_choice``); bf16 ones as ``Bf16Linear``
    (a plain bf16 weight, for a compiled step: inductor packs it itself). The
    decode backend is set either way.
    ``calibrate(model)`` (int8 and int4) runs the still-float model on typical
    inputs (``attnkit.quantize.smooth.lm_calibration`` for a language model);
    at int8 each linear it reaches is smoothed with strength ``alpha``
    (SmoothQuant), at int4 activation-aware scales are folded into the float
    weights and the ranges clipped before rounding (``attnkit.quantize.awq``).
    ``group_size`` (int4 only; 32, 64 or 128) defaults to ``ATTNKIT_INT4_GROUP``
    or 32.

    Raises ``ValueError`` naming ``precision`` for an unknown one, for a
    model on a non-CPU device (the kernels are CPU kernels), for
    ``calibrate`` with another precision than int8 or int4, and for int4 where this
    torch lacks the CPU int4 kernel (the message says which op).
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision: expected one of {', '.join(PRECISIONS)}, got {precision!r}")
    if any(p.device.type != "cpu" for p in model.parameters()):
        raise ValueError("precision: these kernels run on the CPU; load the model there")
    if calibrate is not None and precision not in ("int8", "int4"):
        raise ValueError(
            f"calibrate: SmoothQuant (int8) and AWQ (int4) calibrate; not {precision!r}"
        )
    group = 0
    if precision == "int4":
        why = torch_ops.int4_unavailable()  # looked up per call (tests replace it)
        if why:
            raise ValueError(f"precision int4: {why}")
        group = group_size_from_env() if group_size is None else group_size
        if group not in GROUP_SIZES:
            raise ValueError(f"group_size: expected one of 32, 64, 128; got {group}")
    model.eval()
    maxima: dict[int, Tensor] = {}
    weight_only: set[int] = set()
    if calibrate is not None and precision == "int4":
        apply_awq(model, calibrate, convertible_linears(model), group)
    elif calibrate is not None:
        maxima = input_maxima(model, convertible_linears(model), calibrate)
        weight_only = {id(m.down_proj) for m in model.modules() if isinstance(m, SwiGLU)}
    if precision != "fp32" or pack_fp32:
        kind = "bf16-plain" if precision == "bf16" and not pack_fp32 else precision
        _convert_linears(model, kind, maxima, alpha, weight_only, group)
    if precision != "fp32":
        _quantize_embeddings(model, precision)
    use_backend(model, OneQueryDecode())  # a CPU inference model: decode steps as GEMVs
    if precision == "int8":
        # Int8Linear quantises its input per tensor, so a row's outputs depend on the
        # other rows: beam search keeps the batch as it is (``FixedBatch``) rather than
        # change the outputs of the sentences left when others finish. (Module's
        # __setattr__ is typed for tensors and modules; a bool needs no registration.)
        object.__setattr__(model, "fixed_batch", True)
    return model


def _convert_linears(
    model: nn.Module,
    precision: str,
    maxima: dict[int, Tensor],
    alpha: float,
    weight_only: set[int] | frozenset[int] = frozenset(),
    group_size: int = 0,
) -> None:
    """Replace the convertible linears; those in ``weight_only`` (ids) become ``int8w``."""
    converted = {id(m) for m in convertible_linears(model)}
    done: dict[tuple[int, str], nn.Module] = {}  # a linear shared by two owners: converted once

    def convert(linear: nn.Linear, activation: str = "none") -> nn.Module:
        key = (id(linear), activation)
        if key not in done:
            x_max = maxima.get(id(linear))
            smooth = None if x_max is None else smoothing_factors(linear.weight, x_max, alpha)
            kind = "int8w" if id(linear) in weight_only else precision
            done[key] = _linear(linear, kind, activation, smooth, group_size)
        return done[key]

    for module in list(model.modules()):
        if (isinstance(module, FeedForward) and module.activation is nn.functional.relu
                and id(module.w1) in converted):  # fmt: skip
            # ReLU fused into the first GEMM (the activation becomes a no-op).
            module.w1 = convert(module.w1, "relu")  # type: ignore[assignment]
            module.activation = _identity
        if isinstance(module, TokenEmbedding):
            continue
        for name, child in list(module.named_children()):
            if type(child) is nn.Linear and id(child) in converted:
                setattr(module, name, convert(child))


def _quantize_embeddings(model: nn.Module, precision: str) -> None:
    """Swap every ``TokenEmbedding`` (tied ones stay one module) for a quantised one."""
    converted: dict[int, QuantizedTokenEmbedding] = {}
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, TokenEmbedding):
                if id(child) not in converted:
                    rows = (
                        "int8" if precision in ("int8w", "int4") else precision
                    )  # int8 rows either way
                    converted[id(child)] = QuantizedTokenEmbedding(child, rows)
                setattr(module, name, converted[id(child)])


@torch.no_grad()
def float_linears(model: nn.Module) -> nn.Module:
    """Replace every ``Int4Linear`` and ``Int8BlockLinear`` of ``model`` (a checkpoint
    stored as blocks: ``attnkit.checkpoints.int4_weights``) by an ``nn.Linear`` holding
    its exact weight (``.weight``), in place; returns ``model``. A module shared by two owners
    stays one module, and an output head that kept the blocks of the token table it was
    tied to (``attnkit.interop.gguf.int4_import.tied_heads``) shares that table's
    weight again where the two are equal. (Only ``quantize_model`` fuses a ReLU into
    an int4 linear, and its models are not turned back: the loaded ones have none.)"""
    tables = {tuple(m.weight.shape): m.weight for m in model.modules()
              if isinstance(m, TokenEmbedding)}  # fmt: skip
    done: dict[int, nn.Linear] = {}
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, Int4Linear | Int8BlockLinear):
                if id(child) not in done:
                    bias = child.bias
                    linear = nn.Linear(child.in_features, child.out_features, bias=bias is not None)
                    linear.weight.copy_(child.weight)
                    table = tables.get(tuple(linear.weight.shape))
                    if table is not None and torch.equal(table, linear.weight):
                        linear.weight = table  # tied again, as the model was built
                    if bias is not None:
                        linear.bias.copy_(bias)
                    done[id(child)] = linear.eval()
                setattr(module, name, done[id(child)])
    return model


def model_bytes(model: nn.Module) -> int:
    """Resident bytes of a model's weights: parameters, buffers and packed weights, once each."""
    seen: set[int] = set()
    total = 0
    for module in model.modules():
        if isinstance(module, PackedLinear | Int8Linear | Int4Linear | Int8BlockLinear):
            total += module.nbytes()
        for t in [*module.parameters(recurse=False), *module.buffers(recurse=False)]:
            if t.data_ptr() not in seen:
                seen.add(t.data_ptr())
                total += t.numel() * t.element_size()
    return total
