"""``MarianMTModel`` directories -> attnkit ``EncoderDecoder`` (the inverse of ``hf_marian``).

Every tensor is copied by indexing only, so a model that went attnkit ->
HF -> attnkit comes back bit for bit: q/k/v are concatenated back into the
fused ``qkv_proj``, and the model dimension is permuted back from Marian's
sines-then-cosines layout to attnkit's interleaved one (the inverse of
``hf_marian.interleaved_to_halves``; see that module's doc).

Mapped from ``config.json``: sizes, ``activation_function`` (``relu``,
``gelu``, ``gelu_pytorch_tanh``/``gelu_new`` -> ``gelu_tanh``),
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

import re
from typing import Any

import torch
from torch import Tensor

from attnkit.data.pretrained_tokenizer import PretrainedTokenizer
from attnkit.errors import CheckpointError
from attnkit.interop.hf_files import (
    CONFIG,
    TOKENIZER,
    HFDirectory,
    WeightMap,
    read_tokenizer,
    read_weights,
    special_ids,
    special_token,
    token_id,
)
from attnkit.interop.hf_import_types import Imported
from attnkit.interop.hf_marian import HF_MARIAN_KEYS, MARIAN_ACTIVATIONS, interleaved_to_halves
from attnkit.models.config import TransformerConfig

HF_ACTIVATIONS = {hf: ours for ours, hf in MARIAN_ACTIVATIONS.items()} | {"gelu_new": "gelu_tanh"}
_READS = re.compile(r".*(embed_tokens|shared|lm_head|[qkv]_proj|fc1)\.weight")
_WRITES = re.compile(r".*(out_proj|fc2|layer_norm)\.(weight|bias)")


def _error(d: HFDirectory, field: str, message: str) -> CheckpointError:
    return CheckpointError(f"{d.file(CONFIG)}: {field}: {message}")


def marian_config(d: HFDirectory) -> TransformerConfig:
    """The attnkit config of a Marian ``config.json`` (errors name the field)."""
    for a, b in (("encoder_attention_heads", "decoder_attention_heads"),
                 ("encoder_ffn_dim", "decoder_ffn_dim")):  # fmt: skip
        if d.require(a) != d.require(b):
            raise _error(d, b, f"{d.config[b]} differs from {a}={d.config[a]}; attnkit uses one")
    act = d.get("activation_function", "gelu")
    if act not in HF_ACTIVATIONS:
        supported = ", ".join(HF_ACTIVATIONS)
        raise _error(d, "activation_function", f"{act!r} is not supported (supported: {supported})")
    pad, eos = d.require("pad_token_id"), d.require("eos_token_id")
    start = d.get("decoder_start_token_id", pad)
    if start == pad:
        raise _error(d, "decoder_start_token_id",
                     f"the decoder starts from the pad token ({pad}), OPUS-MT's convention; "
                     "attnkit needs a start token distinct from padding")  # fmt: skip
    vocab = d.require("vocab_size")
    tgt_vocab = d.get("decoder_vocab_size", vocab)
    shared = bool(d.get("share_encoder_decoder_embeddings", True))
    tied = bool(d.get("tie_word_embeddings", True))
    if shared and not tied:
        raise _error(d, "tie_word_embeddings",
                     "false with shared source/target embeddings; attnkit shares them only "
                     "together with the output projection")  # fmt: skip
    return TransformerConfig(
        d_model=d.require("d_model"),
        num_heads=d.require("encoder_attention_heads"),
        d_ff=d.require("encoder_ffn_dim"),
        num_encoder_layers=d.require("encoder_layers"),
        num_decoder_layers=d.require("decoder_layers"),
        dropout=float(d.get("dropout", 0.1)),
        attention_dropout=float(d.get("attention_dropout", 0.0)),
        activation=HF_ACTIVATIONS[act],  # type: ignore[arg-type]
        scale_embeddings=bool(d.get("scale_embedding", False)),
        max_len=d.require("max_position_embeddings"),
        src_vocab_size=vocab,
        tgt_vocab_size=tgt_vocab,
        share_embeddings="all" if shared else "decoder" if tied else "none",
        pad_id=pad,
        bos_id=start,
        eos_id=eos,
    )


# Our fused projections and the HF projections they hold (cross-attention: keys, values).
_FUSED = {".qkv_proj.": "qkv", ".kv_proj.": "kv"}


def _hf_names(c: TransformerConfig) -> tuple[dict[str, str], dict[str, tuple[int, ...]]]:
    """attnkit key (q/k/v split) -> HF key (through ``HF_MARIAN_KEYS``), and its shape."""
    from attnkit.models.encoder_decoder import EncoderDecoder

    with torch.device("meta"):
        state = EncoderDecoder(c).state_dict()
    names, shapes = {}, {}
    for key, value in state.items():
        fused = next((f for f in _FUSED if f in key), None)
        parts = _FUSED[fused] if fused else ("",)
        for part in parts:
            ours = key.replace(fused, f".{part}_proj.") if fused else key
            shape = tuple(value.shape)
            shapes[ours] = (shape[0] // len(parts), *shape[1:]) if fused else shape
            for pattern, template in HF_MARIAN_KEYS:
                m = re.fullmatch(pattern, ours)
                if m:
                    names[ours] = m.expand(template)
                    break
    return names, shapes


def _embedding_names(w: WeightMap, c: TransformerConfig) -> dict[str, str]:
    """Where the three vocabulary matrices are stored (tied ones are stored once)."""

    def first(*names: str) -> str:
        return next((n for n in names if w.has(n)), names[0])

    src = first("model.encoder.embed_tokens.weight", "model.shared.weight")
    tgt = src if c.share_embeddings == "all" else first("model.decoder.embed_tokens.weight")
    out = tgt if c.share_embeddings != "none" else first("lm_head.weight")
    return {"src_embed.tokens.weight": src, "tgt_embed.tokens.weight": tgt,
            "output_proj.weight": out}  # fmt: skip


def marian_state(d: HFDirectory, weights: dict[str, Tensor], c: TransformerConfig) -> WeightMap:
    """attnkit's state dict for ``c`` from a Marian file's ``weights``."""
    w = WeightMap(weights, d)
    bias = weights.get("final_logits_bias")
    if bias is not None and torch.count_nonzero(bias):
        raise CheckpointError(
            f"{d.file('model.safetensors')}: final_logits_bias is nonzero; attnkit's output "
            "projection has no bias, so this model cannot be imported exactly"
        )
    inverse = torch.argsort(interleaved_to_halves(c.d_model))
    names, shapes = _hf_names(c)
    for ours, hf_name in (names | _embedding_names(w, c)).items():
        value = w.get(hf_name)
        if tuple(value.shape) != shapes[ours]:
            raise CheckpointError(
                f"{d.file('model.safetensors')}: {w.name(hf_name)} has shape "
                f"{tuple(value.shape)} but {CONFIG} implies {shapes[ours]}; the weights and "
                f"{CONFIG} come from different models"
            )
        if _READS.fullmatch(hf_name):
            value = value[:, inverse]
        elif _WRITES.fullmatch(hf_name):
            value = value[inverse]
        w.put(ours, hf_name, value)
    for key in [k for k in w.state if ".k_proj." in k]:  # self: q, k, v -> qkv_proj; cross: k, v
        cross = ".cross_attn." in key
        parts = [key.replace(".k_proj.", f".{p}_proj.") for p in ("kv" if cross else "qkv")]
        fused = key.replace(".k_proj.", ".kv_proj." if cross else ".qkv_proj.")
        w.state[fused] = torch.cat([w.state.pop(p) for p in parts], dim=0)
        w.origin[fused] = w.origin.pop(parts[0])
        for p in parts[1:]:
            w.origin.pop(p)
    return w


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


def _model_unk(hf: Any) -> str | None:
    import json

    unk = json.loads(hf.to_str()).get("model", {}).get("unk_token")
    return unk if isinstance(unk, str) else None


def check_tokenizer_fits(d: HFDirectory, tokenizer: PretrainedTokenizer, vocab: int) -> None:
    if tokenizer.vocab_size > vocab:
        raise CheckpointError(
            f"{d.file(TOKENIZER)}: {tokenizer.vocab_size} tokens do not fit the model's "
            f"vocabulary of {vocab}; the tokenizer belongs to another model"
        )


def import_marian(d: HFDirectory) -> Imported:
    """The attnkit config, state dict, tokenizer and notes of a Marian directory."""
    config = marian_config(d)
    tokenizer = marian_tokenizer(d, config)
    check_tokenizer_fits(d, tokenizer, config.tgt_vocab_size)
    w = marian_state(d, read_weights(d), config)
    return Imported(config, w.state, w.origin, tokenizer, [])
