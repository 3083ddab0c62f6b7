"""BERT checkpoints (``BertModel``, ``BertForMaskedLM``, ``BertForSequenceClassification``,
``BertForPreTraining``) -> attnkit ``EncoderOnlyModel``.

The mapping (``config.json`` field -> attnkit config):

* word embeddings -> ``embed.tokens`` with ``scale_embeddings=False`` (BERT
  does not multiply by ``sqrt(d)``); learned positions, ``max_len`` =
  ``max_position_embeddings``;
* the token-type (segment) embeddings -> ``token_types``, ``type_vocab_size``
  = their rows (sentence pairs: type 0, then type 1, as ``tokenizer(a, b)``
  gives ``token_type_ids``);
* the embedding LayerNorm -> ``embedding_norm=True``; ``layer_norm_eps``
  (1e-12) -> ``norm_eps`` (every norm of the model uses it);
* layers: post-LN (``norm_position="post"``), q/k/v fused into ``qkv_proj``,
  ``hidden_act`` ``gelu`` (exact erf) -> ``gelu`` (``gelu_new``/
  ``gelu_pytorch_tanh`` -> ``gelu_tanh``);
* the MLM head ``cls.predictions`` (transform dense, LayerNorm, bias; the
  decoder is tied to the word embeddings) -> ``mlm_head``, when the file has
  one. ``EncoderOnlyModel`` always has an MLM head; a checkpoint without
  one (``BertModel``, e.g. all-MiniLM-L6-v2) gets a **placeholder** head:
  identity dense, unit LayerNorm, zero bias (deterministic, not trained), so
  ``mlm_logits`` are meaningless and ``attnkit fill-mask`` must not be
  trusted; the encoder's hidden states are the model;
* the pooler (``pooler.dense``) with a classifier (``classifier`` or NSP's
  ``cls.seq_relationship``) -> ``classifier.pooler`` / ``classifier.classifier``,
  ``num_labels`` = its rows, ``pooling="first"`` ([CLS]). A pooler without a
  classifier is dropped (``num_labels=0``: attnkit's pooler belongs to its
  classification head) and ``pooling`` is ``"mean"`` (sentence-transformers'
  pooling for sentence embeddings; used by no attnkit head then);
* ids from the tokenizer files: ``[PAD]`` -> ``pad_id``, ``[CLS]`` ->
  ``bos_id``, ``[SEP]`` -> ``eos_id``, ``[MASK]`` -> ``mask_id``, ``[UNK]``.
"""

from __future__ import annotations

import torch

from attnkit.data.pretrained_tokenizer import PretrainedTokenizer
from attnkit.errors import CheckpointError
from attnkit.interop.hf_files import (
    CONFIG,
    HFDirectory,
    WeightMap,
    read_tokenizer,
    read_weights,
    special_ids,
    special_token,
    token_id,
)
from attnkit.interop.hf_import_types import Imported
from attnkit.models.lm_config import EncoderOnlyConfig

BERT_ACTIVATIONS = {"gelu": "gelu", "relu": "relu", "gelu_new": "gelu_tanh",
                    "gelu_pytorch_tanh": "gelu_tanh"}  # fmt: skip


def bert_tokenizer(d: HFDirectory) -> PretrainedTokenizer:
    hf = read_tokenizer(d)

    def find(name: str, default: str, role: str) -> int:
        return token_id(hf, special_token(d, name, default), d, role)

    return PretrainedTokenizer(
        hf,
        pad_id=find("pad_token", "[PAD]", "pad"),
        bos_id=find("cls_token", "[CLS]", "[CLS]"),
        eos_id=find("sep_token", "[SEP]", "[SEP]"),
        unk_id=find("unk_token", "[UNK]", "unknown"),
        mask_id=find("mask_token", "[MASK]", "mask"),
        skip_ids=special_ids(hf),
    )


def _layer(w: WeightMap, i: int) -> None:
    src, ours = f"encoder.layer.{i}.", f"encoder.layers.{i}."
    attn = src + "attention."
    for kind in ("weight", "bias"):
        parts = [w.get(f"{attn}self.{p}.{kind}") for p in ("query", "key", "value")]
        w.put(f"{ours}self_attn.qkv_proj.{kind}", f"{attn}self.query.{kind}", torch.cat(parts))
        w.put(f"{ours}self_attn.out_proj.{kind}", f"{attn}output.dense.{kind}")
        w.put(f"{ours}self_attn_residual.norm.{kind}", f"{attn}output.LayerNorm.{kind}")
        w.put(f"{ours}ffn.w1.{kind}", f"{src}intermediate.dense.{kind}")
        w.put(f"{ours}ffn.w2.{kind}", f"{src}output.dense.{kind}")
        w.put(f"{ours}ffn_residual.norm.{kind}", f"{src}output.LayerNorm.{kind}")


def import_bert(d: HFDirectory) -> Imported:
    """The attnkit config, state dict, tokenizer and notes of a BERT directory."""
    act = d.get("hidden_act", "gelu")
    if act not in BERT_ACTIVATIONS:
        raise CheckpointError(f"{d.file(CONFIG)}: hidden_act: {act!r} is not supported "
                              f"(supported: {', '.join(BERT_ACTIVATIONS)})")  # fmt: skip
    kind = d.get("position_embedding_type", "absolute")
    if kind != "absolute":
        raise CheckpointError(f"{d.file(CONFIG)}: position_embedding_type: {kind!r} is not "
                              "supported (attnkit imports absolute positions only)")  # fmt: skip
    tokenizer = bert_tokenizer(d)
    weights = read_weights(d)
    w = WeightMap(weights, d, prefix="bert.")
    notes = []
    type_vocab_size = 0
    if w.has("embeddings.token_type_embeddings.weight"):
        w.put("token_types.weight", "embeddings.token_type_embeddings.weight")
        type_vocab_size = int(w.state["token_types.weight"].size(0))
    w.put("embed.tokens.weight", "embeddings.word_embeddings.weight")
    w.put("embed.positions.weight", "embeddings.position_embeddings.weight")
    for kind in ("weight", "bias"):
        w.put(f"embed.norm.{kind}", f"embeddings.LayerNorm.{kind}")
    layers = int(d.require("num_hidden_layers"))
    for i in range(layers):
        _layer(w, i)
    D = int(d.require("hidden_size"))
    vocab = int(d.require("vocab_size"))
    if w.has("cls.predictions.transform.dense.weight"):
        head = "cls.predictions."
        for kind in ("weight", "bias"):
            w.put(f"mlm_head.dense.{kind}", f"{head}transform.dense.{kind}")
            w.put(f"mlm_head.norm.{kind}", f"{head}transform.LayerNorm.{kind}")
        w.put("mlm_head.bias", f"{head}bias")
    else:
        word = w.get("embeddings.word_embeddings.weight")
        w.state["mlm_head.dense.weight"] = torch.eye(D, dtype=word.dtype)
        w.state["mlm_head.dense.bias"] = torch.zeros(D, dtype=word.dtype)
        w.state["mlm_head.norm.weight"] = torch.ones(D, dtype=word.dtype)
        w.state["mlm_head.norm.bias"] = torch.zeros(D, dtype=word.dtype)
        w.state["mlm_head.bias"] = torch.zeros(vocab, dtype=word.dtype)
        notes.append(
            "no MLM head in the checkpoint: mlm_head is a placeholder (identity "
            "dense, unit norm, zero bias), not trained; mlm_logits are meaningless"
        )
    w.state["mlm_head.output_proj.weight"] = w.state["embed.tokens.weight"]  # tied, as in BERT
    classifier = next((n for n in ("classifier.weight", "cls.seq_relationship.weight")
                       if n in weights), None)  # fmt: skip
    num_labels = 0
    if classifier is not None and w.has("pooler.dense.weight"):
        num_labels = int(weights[classifier].size(0))
        for kind in ("weight", "bias"):
            w.put(f"classifier.pooler.{kind}", f"pooler.dense.{kind}")
            w.put(f"classifier.classifier.{kind}", classifier.replace("weight", kind))
    elif w.has("pooler.dense.weight"):
        notes.append("pooler.dense dropped: no classifier in the checkpoint (attnkit's pooler "
                     "belongs to its classification head); num_labels=0")  # fmt: skip
    config = EncoderOnlyConfig(
        d_model=D,
        num_heads=int(d.require("num_attention_heads")),
        d_ff=int(d.require("intermediate_size")),
        num_layers=layers,
        dropout=float(d.get("hidden_dropout_prob", 0.1)),
        attention_dropout=float(d.get("attention_probs_dropout_prob", 0.1)),
        activation=BERT_ACTIVATIONS[act],  # type: ignore[arg-type]
        norm_position="post",
        norm_eps=float(d.get("layer_norm_eps", 1e-12)),
        positions="learned",
        scale_embeddings=False,
        embedding_norm=True,
        max_len=int(d.require("max_position_embeddings")),
        vocab_size=vocab,
        num_labels=num_labels,
        pooling="first" if num_labels else "mean",
        type_vocab_size=type_vocab_size,
        pad_id=tokenizer.pad_id,
        bos_id=tokenizer.bos_id,
        eos_id=tokenizer.eos_id,
        # bert_tokenizer always finds [MASK]; a vocabulary without one masks with [UNK]
        mask_id=next(
            i for i in (tokenizer.mask_id, tokenizer.unk_id, tokenizer.pad_id) if i is not None
        ),
    )
    return Imported(config, w.state, w.origin, tokenizer, notes)
