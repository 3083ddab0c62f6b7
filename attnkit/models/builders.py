"""Builders shared by the attention-stack families: a config in, modules out.

Every Transformer-style model (encoder-decoder, decoder-only, encoder-only)
is assembled here from an ``AttentionStackConfig``, so an option the shared
config exposes (``attention_score``, ``positions``, ``norm_position``,
``activation``, dropout) takes effect in every family the same way. Layers
receive their sublayers (composition over flags); the models only wire the
stacks, embeddings and heads together.

``init_weights`` is the one initialisation routine: Xavier-uniform for every
projection matrix and zero biases, as tensor2tensor and fairseq do; token
embeddings keep their own ``N(0, D^-0.5)`` init (``TokenEmbedding``).
"""

from __future__ import annotations

from torch import nn

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
from attnkit.models.config_base import AttentionStackConfig
from attnkit.models.embeddings import InputEmbedding, TokenEmbedding
from attnkit.positions import RelativePositions, build_positions


def attention(c: AttentionStackConfig, *, self_attention: bool) -> MultiHeadAttention:
    """One attention sublayer with the config's score function.

    Relative positions (Shaw et al.) live in self-attention only, one pair of
    tables per layer; cross-attention never has them, as in the paper.
    """
    relative = (
        RelativePositions(c.head_dim, c.max_relative_position)
        if self_attention and c.relative_positions
        else None
    )
    return MultiHeadAttention(
        c.d_model,
        c.num_heads,
        dropout=c.attention_dropout,
        relative_positions=relative,
        score=c.attention_score,
    )


def feed_forward(c: AttentionStackConfig) -> nn.Module:
    return FeedForward(c.d_model, c.d_ff, c.activation)


def residual(c: AttentionStackConfig) -> Residual:
    """Dropout, residual add and LayerNorm, placed by ``norm_position``."""
    return Residual(c.d_model, c.dropout, c.norm_position)


def final_norm(c: AttentionStackConfig) -> nn.LayerNorm | None:
    """Pre-LN layers leave the residual stream un-normalised: end the stack with a norm."""
    return nn.LayerNorm(c.d_model) if c.norm_position == "pre" else None


def input_embedding(c: AttentionStackConfig, tokens: TokenEmbedding) -> InputEmbedding:
    """``tokens`` (scaled by sqrt(D)) plus the config's absolute positions, then dropout."""
    return InputEmbedding(
        tokens, build_positions(c.absolute_positions, c.max_len, c.d_model), c.dropout
    )


def encoder_layer(c: AttentionStackConfig) -> EncoderLayer:
    return EncoderLayer(
        self_attn=attention(c, self_attention=True),
        ffn=feed_forward(c),
        self_attn_residual=residual(c),
        ffn_residual=residual(c),
    )


def encoder(c: AttentionStackConfig, num_layers: int) -> Encoder:
    return Encoder([encoder_layer(c) for _ in range(num_layers)], final_norm(c))


def decoder(c: AttentionStackConfig, num_layers: int) -> Decoder:
    layers = [
        DecoderLayer(
            self_attn=attention(c, self_attention=True),
            cross_attn=attention(c, self_attention=False),
            ffn=feed_forward(c),
            self_attn_residual=residual(c),
            cross_attn_residual=residual(c),
            ffn_residual=residual(c),
        )
        for _ in range(num_layers)
    ]
    return Decoder(layers, final_norm(c))


def causal_layers(c: AttentionStackConfig, num_layers: int) -> list[CausalLayer]:
    """Decoder-only layers: masked self-attention and the FFN."""
    return [
        CausalLayer(
            self_attn=attention(c, self_attention=True),
            ffn=feed_forward(c),
            self_attn_residual=residual(c),
            ffn_residual=residual(c),
        )
        for _ in range(num_layers)
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
