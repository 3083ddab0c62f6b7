"""Builders shared by the attention-stack families: a config in, modules out.

Every Transformer-style model (encoder-decoder, decoder-only, encoder-only,
Vision Transformer) is assembled here from an ``AttentionStackConfig``, so an
option the shared config exposes takes effect in every family the same way:
the score function, positions (absolute, relative, rotary, ALiBi), the norm
and its place, the FFN (ReLU/GELU, SwiGLU, a mixture of experts),
grouped-query attention, local and linear attention, bias-free projections.
Layers receive their sublayers (composition over flags); the models only
wire the stacks, embeddings and heads together.

``init_weights`` is the one initialisation routine: Xavier-uniform for every
projection matrix and zero biases, as tensor2tensor and fairseq do; token
embeddings keep their own ``N(0, D^-0.5)`` init (``TokenEmbedding``).
"""

from __future__ import annotations

import torch
from torch import nn

from attnkit.attention.cross import CrossAttention
from attnkit.attention.linear_module import LinearSelfAttention
from attnkit.attention.local import LocalWindow
from attnkit.attention.multihead import MultiHeadAttention
from attnkit.blocks import (
    CausalLayer,
    Decoder,
    DecoderLayer,
    Encoder,
    EncoderLayer,
    FeedForward,
    Residual,
)
from attnkit.blocks.feedforward import ACTIVATIONS
from attnkit.blocks.moe import MoEFeedForward
from attnkit.blocks.norms import build_norm
from attnkit.blocks.swiglu import SwiGLU
from attnkit.models.config_base import AttentionStackConfig
from attnkit.models.embeddings import InputEmbedding, TokenEmbedding
from attnkit.positions import RelativePositions, build_positions
from attnkit.positions.alibi import ALiBi
from attnkit.positions.rotary import RotaryEmbedding
from attnkit.positions.t5_relative import T5RelativeBias


def rotary(c: AttentionStackConfig) -> RotaryEmbedding | None:
    """One rotary table per stack (shared by its layers), when positions are ``rotary``."""
    if c.positions != "rotary":
        return None
    return RotaryEmbedding(c.head_dim, c.rope_theta, c.max_len)


def t5_bias(c: AttentionStackConfig, *, causal: bool) -> T5RelativeBias | None:
    """One T5 bias table per stack (shared by its layers), when positions are ``t5_relative``:
    bidirectional buckets for an encoder, causal ones for a decoder."""
    if c.positions != "t5_relative":
        return None
    return T5RelativeBias(
        c.num_heads, bidirectional=not causal, num_buckets=c.relative_buckets,
        max_distance=c.relative_max_distance,
    )  # fmt: skip


def attention(
    c: AttentionStackConfig,
    *,
    causal: bool = False,
    rope: RotaryEmbedding | None = None,
    position_bias: T5RelativeBias | None = None,
) -> MultiHeadAttention | LinearSelfAttention:
    """One self-attention sublayer, with the config's position terms and reach.

    ``causal``: a decoder's self-attention (its local window looks back only).
    ``rope``, ``position_bias``: the stack's shared rotary table or T5 bias.
    Cross-attention (``cross_attention``) has none of these: plain softmax
    attention over the encoder output, as in the paper.
    """
    if c.attention == "linear":
        return LinearSelfAttention(c.d_model, c.num_heads, bias=c.bias)
    relative = (
        RelativePositions(c.head_dim, c.max_relative_position) if c.relative_positions else None
    )
    window = None
    if c.attention == "local":
        window = LocalWindow(c.attention_window, c.global_tokens, causal)
    return MultiHeadAttention(
        c.d_model,
        c.num_heads,
        dropout=c.attention_dropout,
        bias=c.bias,
        num_kv_heads=c.num_kv_heads,
        relative_positions=relative,
        rotary=rope,
        alibi=ALiBi(c.num_heads) if c.positions == "alibi" else None,
        position_bias=position_bias,
        window=window,
        score=c.attention_score,
        key_dim=c.key_dim,
    )


def cross_attention(c: AttentionStackConfig) -> CrossAttention:
    """A decoder's attention over the encoder output: softmax, no position terms."""
    return CrossAttention(
        c.d_model, c.num_heads, dropout=c.attention_dropout, bias=c.bias,
        num_kv_heads=c.num_kv_heads, score=c.attention_score, key_dim=c.key_dim,
    )  # fmt: skip


def dense_ffn(c: AttentionStackConfig) -> nn.Module:
    if c.activation == "swiglu":
        return SwiGLU(c.d_model, c.d_ff, bias=c.bias)
    if c.activation == "gated_gelu":  # GEGLU with the tanh GELU, as T5 v1.1
        return SwiGLU(c.d_model, c.d_ff, bias=c.bias, activation=ACTIVATIONS["gelu_tanh"])
    return FeedForward(c.d_model, c.d_ff, c.activation, bias=c.bias)


def feed_forward(c: AttentionStackConfig, layer: int = 0) -> nn.Module:
    """Layer ``layer``'s FFN: a mixture of experts on every ``moe_every``-th layer."""
    if c.ffn == "moe" and (layer + 1) % c.moe_every == 0:
        return MoEFeedForward(
            c.d_model,
            c.d_ff,
            c.num_experts,
            c.moe_top_k,
            capacity_factor=c.capacity_factor,
            expert=lambda: dense_ffn(c),
        )
    return dense_ffn(c)


def residual(c: AttentionStackConfig) -> Residual:
    """Dropout, residual add and the norm, placed by ``norm_position``."""
    return Residual(c.d_model, c.dropout, c.norm_position, c.norm_eps, norm=c.norm)


def final_norm(c: AttentionStackConfig) -> nn.Module | None:
    """Pre-LN layers leave the residual stream un-normalised: end the stack with a norm."""
    return build_norm(c.norm, c.d_model, c.norm_eps) if c.norm_position == "pre" else None


def token_embedding(c: AttentionStackConfig, vocab_size: int) -> TokenEmbedding:
    return TokenEmbedding(vocab_size, c.d_model, scale=c.scale_embeddings)


def input_embedding(c: AttentionStackConfig, tokens: TokenEmbedding) -> InputEmbedding:
    """``tokens`` plus the config's absolute positions (and BERT's norm), then dropout."""
    positions = build_positions(c.absolute_positions, c.max_len, c.d_model)
    norm = build_norm(c.norm, c.d_model, c.norm_eps) if c.embedding_norm else None
    return InputEmbedding(tokens, positions, c.dropout, norm=norm)


def encoder(c: AttentionStackConfig, num_layers: int) -> Encoder:
    rope, bias = rotary(c), t5_bias(c, causal=False)
    layers = [
        EncoderLayer(
            self_attn=attention(c, rope=rope, position_bias=bias),
            ffn=feed_forward(c, i),
            self_attn_residual=residual(c),
            ffn_residual=residual(c),
        )
        for i in range(num_layers)
    ]
    return Encoder(layers, final_norm(c))


def decoder(c: AttentionStackConfig, num_layers: int) -> Decoder:
    rope, bias = rotary(c), t5_bias(c, causal=True)
    layers = [
        DecoderLayer(
            self_attn=attention(c, causal=True, rope=rope, position_bias=bias),
            cross_attn=cross_attention(c),
            ffn=feed_forward(c, i),
            self_attn_residual=residual(c),
            cross_attn_residual=residual(c),
            ffn_residual=residual(c),
        )
        for i in range(num_layers)
    ]
    return Decoder(layers, final_norm(c))


def causal_layers(c: AttentionStackConfig, num_layers: int) -> list[CausalLayer]:
    """Decoder-only layers: masked self-attention and the FFN."""
    rope, bias = rotary(c), t5_bias(c, causal=True)
    return [
        CausalLayer(
            self_attn=attention(c, causal=True, rope=rope, position_bias=bias),
            ffn=feed_forward(c, i),
            self_attn_residual=residual(c),
            ffn_residual=residual(c),
        )
        for i in range(num_layers)
    ]


def init_weights(
    model: nn.Module,
    output_proj: nn.Linear,
    *,
    tied: bool,
    d_model: int,
    query_scale: float = 1.0,
) -> None:
    """Xavier-uniform projections, zero biases; the output projection keeps its own init.

    A tied ``output_proj`` is the token embedding (already ``N(0, D^-0.5)``);
    an untied one gets that same init, so the first logits have the scale a
    tied model's have. ``query_scale`` multiplies every attention's query
    weights after their draw: ``d_k**-0.5`` makes an unscaled dot-product model
    (T5) start as the scaled one would (T5 puts the scale in the init).
    """
    done = {id(output_proj)}
    for module in model.modules():
        if isinstance(module, CrossAttention):
            _init_as_fused(module.q_proj, module.kv_proj)
            done.update((id(module.q_proj), id(module.kv_proj)))
        elif isinstance(module, nn.Linear) and id(module) not in done:
            nn.init.xavier_uniform_(module.weight)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
    if not tied:
        nn.init.normal_(output_proj.weight, std=d_model**-0.5)
    if query_scale != 1.0:
        _scale_queries(model, query_scale)


def _scale_queries(model: nn.Module, factor: float) -> None:
    """Multiply the query rows of every attention module's projections by ``factor``."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, MultiHeadAttention):
                module.qkv_proj.weight[: module.d_model].mul_(factor)
            elif isinstance(module, CrossAttention):
                module.q_proj.weight.mul_(factor)


def _init_as_fused(q_proj: nn.Linear, kv_proj: nn.Linear) -> None:
    """Xavier-uniform over the queries' and the keys'/values' rows as one matrix, as
    ``nn.MultiheadAttention`` initialises its ``in_proj_weight``; zero biases.

    Cross-attention's projections were one fused ``(D + 2 h_kv d, D)`` weight
    before they became two modules: drawing them as that one matrix keeps the
    bound and the random stream, so a seed gives the same model as it did.
    """
    d = q_proj.weight.size(0)
    weight = q_proj.weight.new_empty(d + kv_proj.weight.size(0), q_proj.weight.size(1))
    nn.init.xavier_uniform_(weight)
    with torch.no_grad():
        q_proj.weight.copy_(weight[:d])
        kv_proj.weight.copy_(weight[d:])
    for proj in (q_proj, kv_proj):
        if proj.bias is not None:
            nn.init.zeros_(proj.bias)
