"""attnkit ``EncoderDecoder`` <-> Hugging Face ``T5ForConditionalGeneration`` keys, as data.

T5 (Raffel et al., 2020) is attnkit's encoder-decoder with the ``t5`` options
(``attnkit.models.presets.T5_OPTIONS``): pre-norm RMSNorm, no biases, the
unscaled dot product, T5's relative position bias and no absolute positions.
The correspondence, one rule per tensor (``attnkit.interop.keytable``):

* ``shared.weight`` is the source and target embedding (T5 always shares
  them); ``lm_head.weight`` the output projection when the file has its own
  (T5 v1.1), else the shared matrix (the original T5: ``share_embeddings="all"``);
* q, k, v of self-attention stack into the fused ``qkv_proj``; cross-attention's
  ``EncDecAttention.q`` is ``q_proj`` and its k, v stack into ``kv_proj``;
  ``o`` is ``out_proj``;
* the FFN: ``wi``/``wo`` are ``w1``/``w2`` (ReLU), ``wi_0``/``wi_1``/``wo`` are
  ``gate_proj``/``up_proj``/``down_proj`` (gated, T5 v1.1);
* ``layer.N.layer_norm`` is the norm of the N-th sublayer's residual,
  ``final_layer_norm`` the stack's final norm;
* the relative bias table lives in HF's first layer of each stack
  (``block.0...relative_attention_bias``); attnkit's stack shares one table
  among its layers, so the other layers' keys are ties of layer 0's
  (``t5_ties``). Old files may hold an unused bias in the first
  cross-attention: it is skipped.

Sizes (``t5_dims``): ``D`` d_model, ``F`` d_ff, ``V`` vocabulary, ``H`` heads,
``NB`` buckets, ``enc``/``dec`` layer counts. ``to_hf_t5`` runs the table
backwards (exports; parity tests).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from attnkit.errors import ConfigError
from attnkit.interop.keymap import check_keys, save_state
from attnkit.interop.keytable import Dims, Rule, Table, fuse
from attnkit.models.config import TransformerConfig
from attnkit.models.config_base import GATED_ACTIVATIONS
from attnkit.models.encoder_decoder import EncoderDecoder

if TYPE_CHECKING:
    from transformers import T5ForConditionalGeneration

ENC, DEC = "encoder.block.{enc}.layer", "decoder.block.{dec}.layer"
BIAS = "self_attn.position_bias.table.weight"


def _self_attention(ours: str, theirs: str) -> list[Rule]:
    return [
        fuse(f"{ours}.self_attn.qkv_proj.weight", f"{theirs}.0.SelfAttention.*.weight", "qkv",
             ("D D", "D D", "D D")),
        Rule(f"{ours}.self_attn.out_proj.weight", f"{theirs}.0.SelfAttention.o.weight", "D D"),
        Rule(f"{ours}.self_attn_residual.norm.weight", f"{theirs}.0.layer_norm.weight", "D"),
    ]  # fmt: skip


def _ffn(ours: str, theirs: str, gated: bool) -> list[Rule]:
    """The FFN of sublayer ``theirs`` (``...layer.1`` in the encoder, ``.2`` in the decoder)."""
    dense = f"{theirs}.DenseReluDense"
    if gated:
        matrices = [
            Rule(f"{ours}.ffn.gate_proj.weight", f"{dense}.wi_0.weight", "F D"),
            Rule(f"{ours}.ffn.up_proj.weight", f"{dense}.wi_1.weight", "F D"),
            Rule(f"{ours}.ffn.down_proj.weight", f"{dense}.wo.weight", "D F"),
        ]
    else:
        matrices = [
            Rule(f"{ours}.ffn.w1.weight", f"{dense}.wi.weight", "F D"),
            Rule(f"{ours}.ffn.w2.weight", f"{dense}.wo.weight", "D F"),
        ]
    return [*matrices, Rule(f"{ours}.ffn_residual.norm.weight", f"{theirs}.layer_norm.weight", "D")]


def t5_keys(*, gated: bool) -> Table:
    """attnkit ``EncoderDecoder`` <-> ``T5ForConditionalGeneration``; ``gated``: T5 v1.1's FFN."""
    enc, dec, cross = "encoder.layers.{enc}", "decoder.layers.{dec}", f"{DEC}.1.EncDecAttention"
    rules = [
        Rule("src_embed.tokens.weight", "shared.weight", "V D",
             aliases=("encoder.embed_tokens.weight", "decoder.embed_tokens.weight")),
        Rule("output_proj.weight", "lm_head.weight", "V D"),
        Rule(f"encoder.layers.0.{BIAS}",
             "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", "NB H"),
        Rule(f"decoder.layers.0.{BIAS}",
             "decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", "NB H"),
        *_self_attention(enc, ENC),
        *_ffn(enc, f"{ENC}.1", gated),
        Rule("encoder.final_norm.weight", "encoder.final_layer_norm.weight", "D"),
        *_self_attention(dec, DEC),
        Rule(f"{dec}.cross_attn.q_proj.weight", f"{cross}.q.weight", "D D"),
        fuse(f"{dec}.cross_attn.kv_proj.weight", f"{cross}.*.weight", "kv", ("D D", "D D")),
        Rule(f"{dec}.cross_attn.out_proj.weight", f"{cross}.o.weight", "D D"),
        Rule(f"{dec}.cross_attn_residual.norm.weight", f"{DEC}.1.layer_norm.weight", "D"),
        *_ffn(dec, f"{DEC}.2", gated),
        Rule("decoder.final_norm.weight", "decoder.final_layer_norm.weight", "D"),
    ]  # fmt: skip
    ignore = ("decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight",)
    return Table("attnkit's EncoderDecoder (T5 options)", tuple(rules), ignore)


# T5's config.json field behind each size of ``t5_keys``.
T5_FIELDS = {"D": "d_model", "F": "d_ff", "V": "vocab_size", "H": "num_heads",
             "NB": "relative_attention_num_buckets", "enc": "num_layers",
             "dec": "num_decoder_layers"}  # fmt: skip


def t5_dims(c: TransformerConfig, source: str = "config.json") -> Dims:
    """The sizes ``t5_keys`` refers to, for the model ``c``."""
    values = {"D": c.d_model, "F": c.d_ff, "V": c.src_vocab_size, "H": c.num_heads,
              "NB": c.relative_buckets, "enc": c.num_encoder_layers,
              "dec": c.num_decoder_layers}  # fmt: skip
    return Dims(values, T5_FIELDS, source)


def t5_ties(c: TransformerConfig) -> dict[str, str]:
    """Our keys that share a tensor: the target embedding (and, with ``"all"``, the output
    projection) with the source embedding; every layer's bias table with its stack's first."""
    ties = {"tgt_embed.tokens.weight": "src_embed.tokens.weight"}
    if c.share_embeddings == "all":
        ties["output_proj.weight"] = "src_embed.tokens.weight"
    for stack, layers in (("encoder", c.num_encoder_layers), ("decoder", c.num_decoder_layers)):
        for i in range(1, layers):
            ties[f"{stack}.layers.{i}.{BIAS}"] = f"{stack}.layers.0.{BIAS}"
    return ties


# attnkit's FFN activation -> T5's feed_forward_proj (the inverse of the importer's table).
FEED_FORWARD_PROJ = {"relu": "relu", "gelu": "gelu", "gated_gelu": "gated-gelu",
                     "swiglu": "gated-silu"}  # fmt: skip


def check_t5_expressible(c: object) -> TransformerConfig:
    """``c`` if ``T5ForConditionalGeneration`` can express it; ``ConfigError`` naming the
    first field it cannot."""
    if not isinstance(c, TransformerConfig):
        family = getattr(c, "family", type(c).__name__)
        raise ConfigError(f"family: only encoder-decoder checkpoints map to T5; this is {family!r}")
    wanted: list[tuple[str, object, object]] = [
        ("positions", c.positions, "t5_relative"),
        ("norm", c.norm, "rmsnorm"),
        ("norm_position", c.norm_position, "pre"),
        ("bias", c.bias, False),
        ("attention_score", c.attention_score, "dot"),
        ("scale_embeddings", c.scale_embeddings, False),
        ("embedding_norm", c.embedding_norm, False),
        ("ffn", c.ffn, "dense"),
        ("num_kv_heads", c.kv_heads, c.num_heads),
    ]
    for name, got, expected in wanted:
        if got != expected:
            raise ConfigError(f"{name}: T5 needs {name}={expected!r}; this model has {got!r}")
    if c.share_embeddings not in ("all", "inputs"):
        raise ConfigError(
            f"share_embeddings: T5 shares the source and target embeddings ('all' or 'inputs'); "
            f"this model has {c.share_embeddings!r}"
        )
    if c.activation not in FEED_FORWARD_PROJ:
        raise ConfigError(f"activation: T5 has no FFN for {c.activation!r}")
    return c


def to_hf_t5(model: EncoderDecoder) -> T5ForConditionalGeneration:
    """A ``transformers.T5ForConditionalGeneration`` holding a copy of ``model``'s weights.

    Same logits for the same ids (``attention_mask = src != pad``,
    ``decoder_input_ids`` = attnkit's BOS-first targets). Raises ``ConfigError``
    naming the field of a variant T5 cannot express. Needs ``transformers``.
    """
    from transformers import T5Config, T5ForConditionalGeneration

    c = check_t5_expressible(model.config)
    config = T5Config(  # type: ignore[call-arg]  # decoder_start_token_id: the base's
        vocab_size=c.src_vocab_size, d_model=c.d_model, d_kv=c.head_dim, d_ff=c.d_ff,
        num_layers=c.num_encoder_layers, num_decoder_layers=c.num_decoder_layers,
        num_heads=c.num_heads, relative_attention_num_buckets=c.relative_buckets,
        relative_attention_max_distance=c.relative_max_distance, dropout_rate=c.dropout,
        layer_norm_epsilon=c.norm_eps, feed_forward_proj=FEED_FORWARD_PROJ[c.activation],
        tie_word_embeddings=c.scale_output,  # transformers reads the rescale from it
        pad_token_id=c.pad_id, eos_token_id=c.eos_id, decoder_start_token_id=c.bos_id,
    )  # fmt: skip
    hf = T5ForConditionalGeneration(config)
    if c.share_embeddings == "inputs":  # an output projection of its own (T5 v1.1)
        hf.lm_head.weight = nn.Parameter(torch.empty_like(hf.lm_head.weight))
    ties = t5_ties(c)
    ours = {k: v for k, v in model.state_dict().items() if k not in ties}
    table = t5_keys(gated=c.activation in GATED_ACTIVATIONS).without(ties)
    expected = hf.state_dict()
    mapped = save_state(table, ours, t5_dims(c), expected=expected)
    if c.share_embeddings == "all":
        mapped["lm_head.weight"] = mapped["shared.weight"]
    check_keys(expected, mapped, "T5ForConditionalGeneration state dict")
    with torch.no_grad():
        hf.load_state_dict(mapped, strict=True)
    first = next(model.parameters())
    return hf.to(device=first.device, dtype=first.dtype).train(model.training)  # type: ignore[call-arg]
