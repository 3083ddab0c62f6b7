"""``MarianMTModel`` directories -> attnkit ``EncoderDecoder`` (the inverse of ``hf.marian``).

The tensors go through the export's own table read backwards
(``hf.marian.marian_keys``), copied by indexing only, so a model that went
attnkit -> HF -> attnkit comes back bit for bit: q/k/v are stacked back into
the fused ``qkv_proj`` (cross-attention: ``q_proj`` and the stacked ``kv_proj``),
and the model dimension is permuted back from Marian's sines-then-cosines
layout to attnkit's interleaved one (the inverse of
``hf.marian.interleaved_to_halves``; see that module's doc). Layer counts
and every shape are checked against ``config.json`` first, and the
sinusoid table's size against a ceiling (``import_writer.check_positions``).

Mapped from ``config.json``: sizes, ``activation_function``
(``attnkit.interop.conventions``: ``relu``, ``gelu``, the tanh GELUs ->
``gelu_tanh``),
``scale_embedding``, ``max_position_embeddings``, tying
(``share_encoder_decoder_embeddings`` + ``tie_word_embeddings`` -> ``"all"``;
tying alone -> ``"decoder"``; neither -> ``"none"``), and the ids: pad,
``decoder_start_token_id`` as attnkit's BOS, EOS.

Refused with a one-line error naming the field: a nonzero
``final_logits_bias`` (attnkit's output projection has no bias), a
decoder that starts from ``<pad>`` (OPUS-MT's convention: attnkit needs a
start token distinct from padding), different encoder/decoder head counts or
FFN sizes, activations attnkit lacks (OPUS-MT uses ``swish``), and shared
source/target embeddings with an untied output projection.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import torch

from attnkit.data.pretrained_tokenizer import PretrainedTokenizer
from attnkit.errors import CheckpointError
from attnkit.interop.conventions import activation_from_hf
from attnkit.interop.hf.files import (
    CONFIG,
    WEIGHTS,
    HFDirectory,
    map_weights,
    read_tokenizer,
    read_weights,
    special_ids,
    special_token,
    token_id,
)
from attnkit.interop.hf.marian import marian_dims, marian_keys, marian_ties
from attnkit.interop.import_writer import Imported, check_positions
from attnkit.models.config import TransformerConfig

if TYPE_CHECKING:
    import tokenizers


def marian_config(d: HFDirectory) -> TransformerConfig:
    """The attnkit config of a Marian ``config.json`` (errors name the field)."""
    for a, b in (("encoder_attention_heads", "decoder_attention_heads"),
                 ("encoder_ffn_dim", "decoder_ffn_dim")):  # fmt: skip
        if d.integer(a) != d.integer(b):
            raise d.error(b, f"{d.config[b]} differs from {a}={d.config[a]}; attnkit uses one")
    act = activation_from_hf(d.get("activation_function", "gelu"),
                             f"{d.file(CONFIG)}: activation_function")  # fmt: skip
    pad, eos = d.integer("pad_token_id", least=0), d.integer("eos_token_id", least=0)
    start = d.integer("decoder_start_token_id", pad, least=0)
    if start == pad:
        raise d.error("decoder_start_token_id",
                      f"the decoder starts from the pad token ({pad}), OPUS-MT's convention; "
                      "attnkit needs a start token distinct from padding")  # fmt: skip
    vocab = d.integer("vocab_size")
    shared = bool(d.get("share_encoder_decoder_embeddings", True))
    tied = bool(d.get("tie_word_embeddings", True))
    if shared and not tied:
        raise d.error("tie_word_embeddings",
                      "false with shared source/target embeddings; attnkit shares them only "
                      "together with the output projection")  # fmt: skip
    return d.build(
        TransformerConfig,
        d_model=d.integer("d_model"),
        num_heads=d.integer("encoder_attention_heads"),
        d_ff=d.integer("encoder_ffn_dim"),
        num_encoder_layers=d.integer("encoder_layers"),
        num_decoder_layers=d.integer("decoder_layers"),
        dropout=d.number("dropout", 0.1),
        attention_dropout=d.number("attention_dropout", 0.0),
        activation=act,
        scale_embeddings=bool(d.get("scale_embedding", False)),
        max_len=d.integer("max_position_embeddings"),
        src_vocab_size=vocab,
        tgt_vocab_size=d.integer("decoder_vocab_size", vocab),
        share_embeddings="all" if shared else "decoder" if tied else "none",
        pad_id=pad,
        bos_id=start,
        eos_id=eos,
    )


def marian_tokenizer(d: HFDirectory, c: TransformerConfig) -> PretrainedTokenizer:
    """The directory's tokenizer with the config's ids (unk from the tokenizer files)."""
    hf = read_tokenizer(d)
    model_unk = _model_unk(hf)
    unk = token_id(hf, special_token(d, "unk_token", model_unk), d, "unknown")
    return PretrainedTokenizer(
        hf,
        pad_id=c.pad_id,
        bos_id=c.bos_id,
        eos_id=c.eos_id,
        unk_id=unk,
        skip_ids=special_ids(hf),
        encode_special_tokens=bool(d.tokenizer_config.get("split_special_tokens", False)),
    )


def _model_unk(hf: tokenizers.Tokenizer) -> str | None:
    unk = json.loads(hf.to_str()).get("model", {}).get("unk_token")
    return unk if isinstance(unk, str) else None


def import_marian(d: HFDirectory) -> Imported:
    """The attnkit config, state dict, tokenizer and notes of a Marian directory."""
    config = marian_config(d)
    tokenizer = marian_tokenizer(d, config)
    weights = read_weights(d)
    bias = weights.get("final_logits_bias")
    if bias is not None and torch.count_nonzero(bias):
        raise CheckpointError(
            f"{d.file(WEIGHTS)}: final_logits_bias is nonzero; attnkit's output projection "
            "has no bias, so this model cannot be imported exactly"
        )
    table = marian_keys().tie(marian_ties(config))
    state = map_weights(d, weights, table, marian_dims(config, CONFIG))
    # The sinusoid table is computed, not stored: its size is checked against a ceiling.
    check_positions(config.max_len, config.d_model, f"{d.file(CONFIG)}: max_position_embeddings")
    details = {"architectures": d.config.get("architectures")}
    return Imported(config, state, tokenizer, "hf", "marian", [], details)
