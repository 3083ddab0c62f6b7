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
``NB`` buckets, ``enc``/``dec`` layer counts.
"""

from __future__ import annotations

from attnkit.interop.keytable import Dims, Rule, Table, fuse
from attnkit.models.config import TransformerConfig

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
