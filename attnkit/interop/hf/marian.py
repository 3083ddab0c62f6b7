"""Copy an attnkit ``EncoderDecoder`` into Hugging Face ``MarianMTModel``.

Marian (as ported to ``transformers``) is the paper's post-LN encoder-decoder:
``sqrt(D)``-scaled embeddings plus fixed sinusoids, separate q/k/v
projections, a ``final_logits_bias`` and optionally tied embeddings. It is
the reference for the ``test_against_hf`` parity tests (litgpt-style): same
weights, dropout off, and the logits must agree.

**Sinusoid layout.** The paper (§3.5) and attnkit interleave the table:
``PE[:, 2i] = sin``, ``PE[:, 2i+1] = cos``. Marian puts all the sines in the
first half and all the cosines in the second: ``PE_marian = PE_ours[:, perm]``
with ``perm = [0, 2, 4, ..., 1, 3, 5, ...]``. Two ways to make both models
compute the same function (``permute_dims``):

* ``True`` (default): permute the model dimension of every weight that reads
  or writes the residual stream (embeddings, q/k/v/fc1 inputs, out_proj/fc2
  outputs, LayerNorms; LayerNorm statistics do not depend on the order). HF
  keeps its own table, so the result is a genuine Marian model that survives
  ``save_pretrained``/``from_pretrained``. Its hidden states equal ours with
  the dimensions permuted; logits are identical.
* ``False``: keep our dimension order and overwrite HF's position weights with
  attnkit's interleaved table. Hidden states line up with ours dimension by
  dimension (handy when comparing layer by layer), but HF neither saves
  those weights nor loads them (``_keys_to_ignore_on_save``): a reloaded
  model gets Marian's own table back and is no longer the same function.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from attnkit.errors import ConfigError
from attnkit.interop.conventions import HF_ACTIVATIONS, activation_to_hf
from attnkit.interop.keymap import check_keys, save_state
from attnkit.interop.keytable import Dims, Rule, Step, Table, fuse
from attnkit.models.config import TransformerConfig
from attnkit.models.encoder_decoder import EncoderDecoder

if TYPE_CHECKING:
    from transformers import MarianConfig, MarianMTModel


def interleaved_to_halves(d_model: int) -> Tensor:
    """``perm`` with ``PE_marian == PE_attnkit[:, perm]``: even dims first, then odd."""
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


def _perm(t: Tensor, dims: Dims, inverse: bool) -> Tensor:
    perm = interleaved_to_halves(dims["D"]).to(t.device)
    return torch.argsort(perm) if inverse else perm


# The residual stream's dimension of a tensor that reads it (embeddings, q/k/v, fc1:
# columns; a bias is left alone) or writes it (out_proj, fc2, LayerNorms: rows).
READS_STREAM = Step(
    "model dimension of the inputs",
    load=lambda t, d: t[:, _perm(t, d, True)] if t.dim() == 2 else t,
    save=lambda t, d: t[:, _perm(t, d, False)] if t.dim() == 2 else t,
)
WRITES_STREAM = Step(
    "model dimension of the outputs",
    load=lambda t, d: t[_perm(t, d, True)],
    save=lambda t, d: t[_perm(t, d, False)],
)


def _layer_rules(ours: str, theirs: str, reads: tuple[Step, ...], writes: tuple[Step, ...]):
    """One encoder or decoder layer's self-attention and FFN (prefixes ``ours``, ``theirs``)."""
    return [
        fuse(f"{ours}.self_attn.qkv_proj.{{wb}}", f"{theirs}.self_attn.*_proj.{{wb}}", "qkv",
             ("D D", "D D", "D D"), steps=reads),
        Rule(f"{ours}.self_attn.out_proj.{{wb}}", f"{theirs}.self_attn.out_proj.{{wb}}", "D D",
             writes),
        Rule(f"{ours}.self_attn_residual.norm.{{wb}}", f"{theirs}.self_attn_layer_norm.{{wb}}",
             "D", writes),
        Rule(f"{ours}.ffn.w1.{{wb}}", f"{theirs}.fc1.{{wb}}", "F D", reads),
        Rule(f"{ours}.ffn.w2.{{wb}}", f"{theirs}.fc2.{{wb}}", "D F", writes),
        Rule(f"{ours}.ffn_residual.norm.{{wb}}", f"{theirs}.final_layer_norm.{{wb}}", "D", writes),
    ]  # fmt: skip


def _cross_attention_rules(reads: tuple[Step, ...], writes: tuple[Step, ...]) -> list[Rule]:
    """The decoder's cross-attention: our ``q_proj`` and ``kv_proj`` (keys, then values)
    <-> Marian's ``encoder_attn``."""
    ours, theirs = "decoder.layers.{dec}.cross_attn", "model.decoder.layers.{dec}.encoder_attn"
    return [
        Rule(f"{ours}.q_proj.{{wb}}", f"{theirs}.q_proj.{{wb}}", "D D", reads),
        fuse(f"{ours}.kv_proj.{{wb}}", f"{theirs}.*_proj.{{wb}}", "kv", ("D D", "D D"),
             steps=reads),
        Rule(f"{ours}.out_proj.{{wb}}", f"{theirs}.out_proj.{{wb}}", "D D", writes),
        Rule("decoder.layers.{dec}.cross_attn_residual.norm.{wb}",
             "model.decoder.layers.{dec}.encoder_attn_layer_norm.{wb}", "D", writes),
    ]  # fmt: skip


def marian_keys(permute_dims: bool = True) -> Table:
    """attnkit ``EncoderDecoder`` <-> ``MarianMTModel`` keys; ``permute_dims``: see the module doc.

    Sizes (``marian_dims``): ``D`` model, ``F`` FFN, ``V``/``VT`` source/target
    vocabulary, ``enc``/``dec`` layer counts. Marian's sinusoid tables
    (``embed_positions``) and ``final_logits_bias`` have no attnkit tensor.
    """
    reads, writes = ((READS_STREAM,), (WRITES_STREAM,)) if permute_dims else ((), ())
    rules = [
        Rule("src_embed.tokens.weight", "model.encoder.embed_tokens.weight", "V D", reads,
             aliases=("model.shared.weight",)),
        Rule("tgt_embed.tokens.weight", "model.decoder.embed_tokens.weight", "VT D", reads),
        Rule("output_proj.weight", "lm_head.weight", "VT D", reads),
        *_layer_rules("encoder.layers.{enc}", "model.encoder.layers.{enc}", reads, writes),
        *_layer_rules("decoder.layers.{dec}", "model.decoder.layers.{dec}", reads, writes),
        *_cross_attention_rules(reads, writes),
    ]  # fmt: skip
    ignore = ("model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight",
              "final_logits_bias")  # fmt: skip
    return Table("attnkit's EncoderDecoder", tuple(rules), ignore)


# Marian's config.json field behind each size of ``marian_keys``.
MARIAN_FIELDS = {"D": "d_model", "F": "encoder_ffn_dim", "V": "vocab_size",
                 "VT": "decoder_vocab_size", "enc": "encoder_layers",
                 "dec": "decoder_layers"}  # fmt: skip


def marian_dims(c: TransformerConfig, source: str = "config.json") -> Dims:
    """The sizes ``marian_keys`` refers to, for the model ``c``."""
    values = {"D": c.d_model, "F": c.d_ff, "V": c.src_vocab_size, "VT": c.tgt_vocab_size,
              "enc": c.num_encoder_layers, "dec": c.num_decoder_layers}  # fmt: skip
    return Dims(values, MARIAN_FIELDS, source)


def marian_ties(c: TransformerConfig) -> dict[str, str]:
    """Our keys that share a tensor under ``c.share_embeddings`` (stored once by HF)."""
    if c.share_embeddings == "all":
        return {"tgt_embed.tokens.weight": "src_embed.tokens.weight",
                "output_proj.weight": "src_embed.tokens.weight"}  # fmt: skip
    tied = c.share_embeddings == "decoder"
    return {"output_proj.weight": "tgt_embed.tokens.weight"} if tied else {}


# attnkit activations a Marian FFN (two matrices) can have: those with a plain HF name.
MARIAN_ACTIVATIONS = tuple(dict.fromkeys(HF_ACTIVATIONS.values()))
# Marian's LayerNorms are nn.LayerNorm(d_model): eps is fixed at 1e-5.
MARIAN_NORM_EPS = 1e-5


def check_marian_expressible(c: object) -> None:
    """Raise ``ConfigError`` naming the first field ``MarianMTModel`` cannot express.

    Marian is the paper's model: post-LN LayerNorm (eps 1e-5), fixed sinusoids,
    full multi-head attention with biases, a dense ReLU/GELU FFN, no norm
    after the embeddings. Bias-free projections are fine (exported as zeros).
    """
    if not isinstance(c, TransformerConfig):
        family = getattr(c, "family", type(c).__name__)
        raise ConfigError(
            f"family: only Transformer (encoder-decoder) checkpoints map to MarianMTModel; "
            f"this is a {family!r} checkpoint"
        )
    wanted: list[tuple[str, Any, Any]] = [
        ("norm_position", c.norm_position, "post"),
        ("positions", c.positions, "sinusoidal"),
        ("norm", c.norm, "layernorm"),
        ("attention_score", c.attention_score, "scaled_dot"),
        ("attention", c.attention, "dense"),
        ("ffn", c.ffn, "dense"),
        ("embedding_norm", c.embedding_norm, False),
        ("num_kv_heads", c.kv_heads, c.num_heads),
        ("key_dim", c.key_dim, None),
    ]
    for field, got, expected in wanted:
        if got != expected:
            raise ConfigError(
                f"{field}: MarianMTModel needs {field}={expected!r}; this model has "
                f"{got!r}, which transformers' Marian cannot express"
            )
    if c.activation not in MARIAN_ACTIVATIONS:
        raise ConfigError(
            f"activation: MarianMTModel has a two-matrix FFN ({', '.join(MARIAN_ACTIVATIONS)}); "
            f"cannot express activation={c.activation!r}"
        )
    if abs(c.norm_eps - MARIAN_NORM_EPS) > 1e-12:
        raise ConfigError(
            f"norm_eps: Marian's LayerNorms use eps {MARIAN_NORM_EPS}; this model has {c.norm_eps}"
        )


def hf_marian_config(c: TransformerConfig, attn_implementation: str = "sdpa") -> MarianConfig:
    """A ``MarianConfig`` with ``c``'s sizes, ids and tying.

    Raises ``ConfigError`` (a ``ValueError``) naming the field of a variant
    Marian cannot express (``check_marian_expressible``).
    """
    from transformers import MarianConfig

    check_marian_expressible(c)
    # HF ties lm_head to the decoder embedding only when tie_word_embeddings, and
    # shares encoder/decoder embeddings only when both flags are set.
    return MarianConfig(  # type: ignore[call-arg]  # attn_implementation goes to the base
        vocab_size=c.src_vocab_size,
        decoder_vocab_size=c.tgt_vocab_size,
        share_encoder_decoder_embeddings=c.share_embeddings == "all",
        tie_word_embeddings=c.share_embeddings in ("decoder", "all"),
        d_model=c.d_model,
        encoder_layers=c.num_encoder_layers,
        decoder_layers=c.num_decoder_layers,
        encoder_attention_heads=c.num_heads,
        decoder_attention_heads=c.num_heads,
        encoder_ffn_dim=c.d_ff,
        decoder_ffn_dim=c.d_ff,
        activation_function=activation_to_hf(c.activation),
        dropout=c.dropout,
        attention_dropout=c.attention_dropout,
        activation_dropout=0.0,  # attnkit has no dropout inside the FFN
        scale_embedding=c.scale_embeddings,
        max_position_embeddings=c.max_len,
        pad_token_id=c.pad_id,
        bos_token_id=c.bos_id,
        eos_token_id=c.eos_id,
        forced_eos_token_id=c.eos_id,
        decoder_start_token_id=c.bos_id,  # attnkit targets start with BOS
        attn_implementation=attn_implementation,
    )


def to_hf_marian(
    model: EncoderDecoder, *, permute_dims: bool = True, attn_implementation: str = "sdpa"
) -> MarianMTModel:
    """A ``transformers.MarianMTModel`` holding a copy of ``model``'s weights.

    ``model(src, tgt).logits`` equals ``hf(input_ids=src, attention_mask=src != pad,
    decoder_input_ids=tgt, decoder_attention_mask=tgt != pad).logits`` at every
    real target position (see the module docstring for ``permute_dims``).
    Raises ``ConfigError`` (a ``ValueError``) naming the field of a variant
    Marian cannot express (pre-LN, learned positions, RMSNorm, SwiGLU, GQA,
    ...). Needs ``transformers``.
    """
    from transformers import MarianMTModel

    config = hf_marian_config(model.config, attn_implementation)
    hf = MarianMTModel(config)
    hf_state = hf.state_dict()

    mapped = save_state(marian_keys(permute_dims), model.state_dict(), marian_dims(model.config),
                        expected=hf_state)  # fmt: skip
    for side, embed in (("encoder", model.src_embed), ("decoder", model.tgt_embed)):
        key = f"model.{side}.embed_positions.weight"
        positions: Any = embed.positions  # sinusoidal (checked above)
        mapped[key] = hf_state[key] if permute_dims else positions.table
    mapped["final_logits_bias"] = torch.zeros_like(hf_state["final_logits_bias"])

    if not model.config.bias:  # Marian always has biases: zeros compute the same function
        for key, value in hf_state.items():
            if key.endswith("_proj.bias") or re.fullmatch(r".*\.fc[12]\.bias", key):
                mapped.setdefault(key, torch.zeros_like(value))
    check_keys(hf_state, mapped, "MarianMTModel state dict")
    with torch.no_grad():
        hf.load_state_dict(mapped, strict=True)
    first = next(model.parameters())
    return hf.to(device=first.device, dtype=first.dtype).train(model.training)  # type: ignore[call-arg]
