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

from torch import nn

from attnkit.attention.linear import LinearSelfAttention
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
from attnkit.blocks.moe import MoEFeedForward
from attnkit.blocks.norms import build_norm
from attnkit.blocks.swiglu import SwiGLU
from attnkit.models.config_base import AttentionStackConfig
from attnkit.models.embeddings import InputEmbedding, TokenEmbedding
from attnkit.positions import RelativePositions, build_positions
from attnkit.positions.rotary import RotaryEmbedding


def rotary(c: AttentionStackConfig) -> RotaryEmbedding | None:
    """One rotary table per stack (shared by its layers), when positions are ``rotary``."""
    if c.positions != "rotary":
        return None
    return RotaryEmbedding(c.head_dim, c.rope_theta, c.max_len)


def attention(
    c: AttentionStackConfig,
    *,
    self_attention: bool,
    causal: bool = False,
    rope: RotaryEmbedding | None = None,
) -> nn.Module:
    """One attention sublayer.

    Position terms (relative, rotary, ALiBi) and the local window live in
    self-attention only; cross-attention is plain softmax attention over the
    encoder output, as in the paper. ``causal``: a decoder's self-attention.
    """
    if self_attention and c.attention == "linear":
        return LinearSelfAttention(c.d_model, c.num_heads, bias=c.bias)
    relative = (
        RelativePositions(c.head_dim, c.max_relative_position)
        if self_attention and c.relative_positions
        else None
    )
    return MultiHeadAttention(
        c.d_model,
        c.num_heads,
        dropout=c.attention_dropout,
        bias=c.bias,
        num_kv_heads=c.num_kv_heads,
        relative_positions=relative,
        rotary=rope if self_attention else None,
        alibi=self_attention and c.positions == "alibi",
        window=c.attention_window if self_attention and c.attention == "local" else None,
        global_tokens=c.global_tokens if self_attention else 0,
        causal=causal,
        score=c.attention_score,
    )


def cross_attention(c: AttentionStackConfig) -> MultiHeadAttention:
    """A decoder's attention over the encoder output: softmax, no position terms."""
    return MultiHeadAttention(
        c.d_model, c.num_heads, dropout=c.attention_dropout, bias=c.bias,
        num_kv_heads=c.num_kv_heads, score=c.attention_score,
    )  # fmt: skip


def dense_ffn(c: AttentionStackConfig) -> nn.Module:
    if c.activation == "swiglu":
        return SwiGLU(c.d_model, c.d_ff, bias=c.bias)
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
    rope = rotary(c)
    layers = [
        EncoderLayer(
            self_attn=attention(c, self_attention=True, rope=rope),
            ffn=feed_forward(c, i),
            self_attn_residual=residual(c),
            ffn_residual=residual(c),
        )
        for i in range(num_layers)
    ]
    return Encoder(layers, final_norm(c))


def decoder(c: AttentionStackConfig, num_layers: int) -> Decoder:
    rope = rotary(c)
    layers = [
        DecoderLayer(
            self_attn=attention(c, self_attention=True, causal=True, rope=rope),
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
    rope = rotary(c)
    return [
        CausalLayer(
            self_attn=attention(c, self_attention=True, causal=True, rope=rope),
            ffn=feed_forward(c, i),
            self_attn_residual=residual(c),
            ffn_residual=residual(c),
        )
        for i in range(num_layers)
    ]


def init_weights(model: nn.Module, output_proj: nn.Linear, *, tied: bool, d_model: int) -> None:
    """Xavier-uniform projections, zero biases; the output projection keeps its own init.

    A tied ``output_proj`` is the token embedding (already ``N(0, D^-0.5)``);
    an untied one gets that same init, so the first logits have the scale a
    tied model's have.
    """
    for module in model.modules():
        if isinstance(module, nn.Linear) and module is not output_proj:
            nn.init.xavier_uniform_(module.weight)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
    if not tied:
        nn.init.normal_(output_proj.weight, std=d_model**-0.5)
