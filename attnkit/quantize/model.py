"""``quantize_model``: swap an ``EncoderDecoder``'s float linears for packed/int8 ones (CPU).

Precisions (``PRECISIONS``):

* ``"fp32"``: every ``nn.Linear`` becomes a oneDNN-prepacked fp32
  ``PackedLinear`` (same math, ~2.5x the GEMM rate of MKL's sgemm on AMD);
* ``"bf16"``: ``PackedLinear(precision="bf16")``; token embeddings in bf16;
* ``"int8"``: ``Int8Linear`` (per-channel int8 weights, dynamic activations);
  token embeddings int8 per row.

The residual stream, LayerNorm, softmax and attention stay fp32. The FFN's
first linear fuses its ReLU. The model is converted **in place** (and
returned), for inference only; ``model(src, tgt)``, ``model.start/step`` and
the searches keep working.

Cross-attention: ``MultiHeadAttention`` slices ``qkv_proj.weight`` for the
decoder's cross-attention (``weight[:D]`` for queries, ``weight[D:]`` for
keys/values), which a packed or quantised weight cannot offer. Here each
cross-attention module gets two modules instead, ``q_proj`` ``(D -> D)`` and
``kv_proj`` ``(D -> 2D)``, and its class becomes ``SplitCrossAttention``,
which calls them. (The recommended change to ``multihead.py`` is the same:
project through sub-modules, never through slices of a weight.)
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from attnkit.attention.cache import KVCache
from attnkit.attention.functional import attend
from attnkit.attention.multihead import MultiHeadAttention
from attnkit.blocks.feedforward import FeedForward
from attnkit.models.embeddings import TokenEmbedding
from attnkit.models.encoder_decoder import EncoderDecoder
from attnkit.quantize.linear import Int8Linear, PackedLinear

PRECISIONS = ("fp32", "bf16", "int8")


class SplitCrossAttention(MultiHeadAttention):
    """Cross-attention through ``q_proj`` and ``kv_proj`` modules instead of weight slices."""

    q_proj: nn.Module
    kv_proj: nn.Module

    def project_kv(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """Keys and values of ``memory`` ``(B, S, D)``, ``(B, h, S, d)`` each."""
        k, v = self.kv_proj(memory).chunk(2, dim=-1)
        return self._heads(k), self._heads(v)

    def forward(
        self,
        x: Tensor,
        memory: Tensor | tuple[Tensor, Tensor] | None = None,
        *,
        mask: Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
        cache: KVCache | None = None,
        layer: int = 0,
    ) -> tuple[Tensor, Tensor | None]:
        """As ``MultiHeadAttention.forward`` for cross-attention (``memory`` required)."""
        if memory is None:
            raise ValueError("memory: SplitCrossAttention is cross-attention only")
        q = self._heads(self.q_proj(x))
        k, v = memory if isinstance(memory, tuple) else self.project_kv(memory)
        out, weights = attend(
            q, k, v, mask=mask, is_causal=is_causal, need_weights=need_weights, score=self.score
        )
        b, _, t, _ = out.shape
        return self.out_proj(out.transpose(1, 2).reshape(b, t, self.d_model)), weights


class QuantizedTokenEmbedding(nn.Module):
    """``TokenEmbedding`` with bf16 rows, or int8 rows and a per-row fp32 scale; fp32 out."""

    def __init__(self, embedding: TokenEmbedding, precision: str) -> None:
        super().__init__()
        w = embedding.weight.detach()
        self.scale = embedding.scale
        if precision == "int8":
            row_scale = w.abs().amax(dim=1).clamp(min=1e-12) / 127.0
            self.register_buffer("weight_int8", torch.round(w / row_scale[:, None]).to(torch.int8))
            self.register_buffer("row_scale", row_scale.float())
        else:
            self.register_buffer("weight_bf16", w.to(torch.bfloat16))

    def forward(self, ids: Tensor) -> Tensor:
        """``ids`` ``(B, T)`` -> ``(B, T, D)`` fp32, times ``sqrt(D)``."""
        if hasattr(self, "weight_int8"):
            rows = nn.functional.embedding(ids, self.weight_int8).float()
            return rows * (nn.functional.embedding(ids, self.row_scale[:, None]) * self.scale)
        return nn.functional.embedding(ids, self.weight_bf16).float() * self.scale


def _linear_factory(precision: str) -> Callable[..., nn.Module]:
    if precision == "int8":
        return lambda w, b, act="none": Int8Linear(w, b, activation=act)
    return lambda w, b, act="none": PackedLinear(w, b, precision=precision, activation=act)


@torch.no_grad()
def quantize_model(model: EncoderDecoder, precision: str) -> EncoderDecoder:
    """Convert ``model``'s linears (and embeddings for bf16/int8) in place; returns it in eval mode.

    Raises ``ValueError`` naming ``precision`` for an unknown one, and for a
    model on a non-CPU device (the kernels are CPU kernels).
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision: expected one of {PRECISIONS}, got {precision!r}")
    if any(p.device.type != "cpu" for p in model.parameters()):
        raise ValueError("precision: quantize_model converts CPU models only; call .cpu() first")
    make = _linear_factory(precision)
    model.eval()
    cross = {id(layer.cross_attn) for layer in model.decoder.layers}
    for module in list(model.modules()):
        if isinstance(module, MultiHeadAttention):
            w, b = module.qkv_proj.weight, module.qkv_proj.bias
            d = module.d_model
            if id(module) in cross:
                module.q_proj = make(w[:d], None if b is None else b[:d])
                module.kv_proj = make(w[d:], None if b is None else b[d:])
                del module.qkv_proj
                module.__class__ = SplitCrossAttention
            else:
                module.qkv_proj = make(w, b)
            module.out_proj = make(module.out_proj.weight, module.out_proj.bias)
        elif isinstance(module, FeedForward):
            fuse = module.activation is nn.functional.relu
            module.w1 = make(module.w1.weight, module.w1.bias, "relu" if fuse else "none")
            if fuse:
                module.activation = _identity
            module.w2 = make(module.w2.weight, module.w2.bias)
    model.output_proj = make(model.output_proj.weight, None)
    if precision != "fp32":
        converted: dict[int, QuantizedTokenEmbedding] = {}
        for emb in (model.src_embed, model.tgt_embed):
            key = id(emb.tokens)  # tied src/tgt embeddings stay one module
            if key not in converted:
                converted[key] = QuantizedTokenEmbedding(emb.tokens, precision)
            emb.tokens = converted[key]
    model.quantized_precision = precision
    return model


def _identity(x: Tensor) -> Tensor:
    return x


def model_bytes(model: nn.Module) -> int:
    """Resident bytes of a model's weights: parameters, buffers and packed weights, once each."""
    seen: set[int] = set()
    total = 0
    for module in model.modules():
        if isinstance(module, PackedLinear | Int8Linear):
            total += module.nbytes()
        for t in [*module.parameters(recurse=False), *module.buffers(recurse=False)]:
            if t.data_ptr() not in seen:
                seen.add(t.data_ptr())
                total += t.numel() * t.element_size()
    return total
