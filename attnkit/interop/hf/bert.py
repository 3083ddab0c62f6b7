"""BERT checkpoints (``BertModel``, ``BertForMaskedLM``, ``BertForSequenceClassification``,
``BertForPreTraining``, ``BertForTokenClassification``, ``BertForQuestionAnswering``)
-> attnkit ``EncoderOnlyModel``.

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
  classifier (``BertModel``) is kept as ``classifier.pooler`` of a head with no
  labels (``num_labels=0``, ``pooler=True``), so fine-tuning a classifier
  starts from the pretrained pooler as transformers' does; ``pooling`` is then
  ``"mean"`` (sentence-transformers' pooling for sentence embeddings);
* a token-level task head (``BertForTokenClassification``'s ``classifier``,
  ``BertForQuestionAnswering``'s ``qa_outputs``) -> ``token_classifier``
  with ``label_level="token"`` and the label names (``id2label``; start and
  end), so ``attnkit tag`` / ``attnkit answer`` run the import as it is
  (``attnkit.interop.hf.bert_heads``); such a file's pooler, if any, is
  dropped, as transformers' classes have none;
* ids from the tokenizer files: ``[PAD]`` -> ``pad_id``, ``[CLS]`` ->
  ``bos_id``, ``[SEP]`` -> ``eos_id``, ``[MASK]`` -> ``mask_id``, ``[UNK]``.

The keys are tables (``attnkit.interop.keymap``): ``BERT_LAYERS``, the
positions and token types (``BERT_POSITIONS_ONLY``, ``BERT_TOKEN_TYPES``),
``BERT_MLM_HEAD`` and ``BERT_CLASSIFIER`` or a task head's rule
(``bert_heads.TASK_HEADS``) when the file has those heads (``bert_table``); a
file's ``bert.`` prefix is optional.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attnkit.data.pretrained_tokenizer import PretrainedTokenizer
from attnkit.errors import CheckpointError
from attnkit.interop.conventions import activation_from_hf
from attnkit.interop.hf.bert_heads import TaskHead, labels_from_hf, task_head_of
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
from attnkit.interop.hf.pooling import sentence_embedding_details
from attnkit.interop.import_writer import Imported
from attnkit.interop.keytable import Rule, Table, fuse
from attnkit.models.lm_config import EncoderOnlyConfig

_L = "encoder.layer.{i}"
BERT_LAYERS: tuple[Rule, ...] = (
    Rule("embed.tokens.weight", "embeddings.word_embeddings.weight", "V D"),
    Rule("embed.norm.{wb}", "embeddings.LayerNorm.{wb}", "D"),
    fuse("encoder.layers.{i}.self_attn.qkv_proj.{wb}", f"{_L}.attention.self.*.{{wb}}",
         ("query", "key", "value"), ("D D", "D D", "D D")),
    Rule("encoder.layers.{i}.self_attn.out_proj.{wb}", f"{_L}.attention.output.dense.{{wb}}",
         "D D"),
    Rule("encoder.layers.{i}.self_attn_residual.norm.{wb}",
         f"{_L}.attention.output.LayerNorm.{{wb}}", "D"),
    Rule("encoder.layers.{i}.ffn.w1.{wb}", f"{_L}.intermediate.dense.{{wb}}", "F D"),
    Rule("encoder.layers.{i}.ffn.w2.{wb}", f"{_L}.output.dense.{{wb}}", "D F"),
    Rule("encoder.layers.{i}.ffn_residual.norm.{wb}", f"{_L}.output.LayerNorm.{{wb}}", "D"),
)  # fmt: skip

# The token-type (segment) embeddings: their own table (``type_vocab_size`` rows), added to
# every position by type as BERT does (sentence pairs: type 0, then type 1).
BERT_TOKEN_TYPES = Rule("token_types.weight", "embeddings.token_type_embeddings.weight", "T D")
BERT_POSITIONS_ONLY = Rule("embed.positions.weight", "embeddings.position_embeddings.weight", "P D")
PLACEHOLDER_NOTE = ("no MLM head in the checkpoint: mlm_head is a placeholder (identity dense, "
                    "unit norm, zero bias), not trained; mlm_logits are meaningless")  # fmt: skip

BERT_MLM_HEAD: tuple[Rule, ...] = (
    Rule("mlm_head.dense.{wb}", "cls.predictions.transform.dense.{wb}", "D D"),
    Rule("mlm_head.norm.{wb}", "cls.predictions.transform.LayerNorm.{wb}", "D"),
    Rule("mlm_head.bias", "cls.predictions.bias", "V"),
)
BERT_CLASSIFIER: tuple[Rule, ...] = (
    Rule("classifier.pooler.{wb}", "pooler.dense.{wb}", "D D"),
    Rule("classifier.classifier.{wb}", "classifier.{wb}", "C D",
         aliases=("cls.seq_relationship.{wb}",)),
)  # fmt: skip
# Tied to the word embeddings (the MLM decoder), or buffers.
BERT_IGNORED = ("embeddings.position_ids", "cls.predictions.decoder.{wb}")
BERT_FIELDS = {"D": "hidden_size", "F": "intermediate_size", "V": "vocab_size",
               "P": "max_position_embeddings", "T": "type_vocab_size", "i": "num_hidden_layers",
               "C": "classifier rows"}  # fmt: skip


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


def bert_table(keys: set[str], head: TaskHead | None = None) -> tuple[Table, list[str], str | None]:
    """The table for a file holding ``keys`` (its heads), its notes, and the classifier key.

    ``head``: the file's token-level task head (``bert_heads.task_head_of``), mapped
    in place of the sequence classifier; a pooler beside it is skipped.
    """
    has = {k.removeprefix("bert.") for k in keys}.__contains__
    rules, ignore, notes = [*BERT_LAYERS], [*BERT_IGNORED], []
    rules.append(BERT_POSITIONS_ONLY)
    if has("embeddings.token_type_embeddings.weight"):
        rules.append(BERT_TOKEN_TYPES)
    if has("cls.predictions.transform.dense.weight"):
        rules += BERT_MLM_HEAD
    else:
        notes.append(PLACEHOLDER_NOTE)
    classifier = next((n for n in ("classifier.weight", "cls.seq_relationship.weight")
                       if has(n)), None)  # fmt: skip
    if head is not None:  # transformers' token-level classes have no pooler
        rules.append(head.rule)
        ignore += ["pooler.dense.{wb}", "classifier.{wb}", "cls.seq_relationship.{wb}"]
        classifier = head.their_weight
    elif classifier is not None and has("pooler.dense.weight"):
        rules += BERT_CLASSIFIER
    else:
        classifier = None
        ignore += ["classifier.{wb}", "cls.seq_relationship.{wb}"]
        if has("pooler.dense.weight"):  # kept: fine-tuning starts from it, as in transformers
            rules.append(BERT_CLASSIFIER[0])
            notes.append("pooler.dense kept as the classification head's pooler (no classifier "
                         "in the checkpoint: num_labels=0, pooler=true)")  # fmt: skip
    table = Table("attnkit's EncoderOnlyModel", tuple(rules), tuple(ignore), prefix="bert.")
    return table.tie({"mlm_head.output_proj.weight": "embed.tokens.weight"}), notes, classifier


def placeholder_mlm_head(d_model: int, vocab: int, like: Tensor) -> dict[str, Tensor]:
    """An MLM head that changes nothing (identity dense, unit norm, zero bias): not trained."""
    kind = like.dtype
    return {
        "mlm_head.dense.weight": torch.eye(d_model, dtype=kind),
        "mlm_head.dense.bias": torch.zeros(d_model, dtype=kind),
        "mlm_head.norm.weight": torch.ones(d_model, dtype=kind),
        "mlm_head.norm.bias": torch.zeros(d_model, dtype=kind),
        "mlm_head.bias": torch.zeros(vocab, dtype=kind),
    }


def import_bert(d: HFDirectory) -> Imported:
    """The attnkit config, state dict, tokenizer and notes of a BERT directory."""
    act = activation_from_hf(d.get("hidden_act", "gelu"), f"{d.file(CONFIG)}: hidden_act")
    kind = d.get("position_embedding_type", "absolute")
    if kind != "absolute":
        message = f"{kind!r} is not supported (attnkit imports absolute positions only)"
        raise d.error("position_embedding_type", message)
    tokenizer = bert_tokenizer(d)
    weights = read_weights(d)
    head = task_head_of(d.get("architectures"), weights)
    table, notes, classifier = bert_table(set(weights), head)
    num_labels = int(weights[_prefixed(weights, classifier)].size(0)) if classifier else 0
    labels = _head_labels(d, head, num_labels)
    D, vocab = d.integer("hidden_size"), d.integer("vocab_size")
    values = {"D": D, "F": d.integer("intermediate_size"), "V": vocab,
              "P": d.integer("max_position_embeddings"), "T": d.integer("type_vocab_size", 2),
              "i": d.integer("num_hidden_layers"), "C": num_labels}  # fmt: skip
    state = map_weights(d, weights, table, d.dims(values, BERT_FIELDS))
    types = state.get("token_types.weight")
    type_vocab_size = 0 if types is None else int(types.size(0))
    if "mlm_head.dense.weight" not in state:
        state |= placeholder_mlm_head(D, vocab, state["embed.tokens.weight"])
    config = d.build(
        EncoderOnlyConfig,
        d_model=D,
        num_heads=d.integer("num_attention_heads"),
        d_ff=values["F"],
        num_layers=values["i"],
        dropout=d.number("hidden_dropout_prob", 0.1),
        attention_dropout=d.number("attention_probs_dropout_prob", 0.1),
        activation=act,
        norm_position="post",
        norm_eps=d.number("layer_norm_eps", 1e-12),
        positions="learned",
        scale_embeddings=False,
        embedding_norm=True,
        max_len=values["P"],
        vocab_size=vocab,
        num_labels=num_labels,
        pooling="first" if num_labels else "mean",
        label_level="sequence" if head is None else "token",
        label_names=labels,
        pooler="classifier.pooler.weight" in state,
        type_vocab_size=type_vocab_size,
        pad_id=tokenizer.pad_id,
        bos_id=tokenizer.bos_id,
        eos_id=tokenizer.eos_id,
        # bert_tokenizer always finds [MASK]; a vocabulary without one masks with [UNK]
        mask_id=next(
            i for i in (tokenizer.mask_id, tokenizer.unk_id, tokenizer.pad_id) if i is not None
        ),
    )
    details = {"architectures": d.config.get("architectures")}
    if head is not None:  # what `attnkit tag` / `attnkit answer` and train --init read
        details["task"] = head.task
    sentence = sentence_embedding_details(d.path)
    if sentence is not None:  # a sentence-transformers model: how `attnkit embed` pools
        details["sentence_embedding"] = sentence
    return Imported(config, state, tokenizer, "hf", "bert", notes, details)


def _prefixed(weights: dict[str, Tensor], name: str) -> str:
    return name if name in weights else f"bert.{name}"


def _head_labels(d: HFDirectory, head: TaskHead | None, count: int) -> tuple[str, ...]:
    """The label names of a token-level head (``()`` for any other model)."""
    if head is None:
        return ()
    if head.labels is None:
        return labels_from_hf(d.get("id2label"), count)
    if count != len(head.labels):
        raise CheckpointError(
            f"{d.file(WEIGHTS)}: tensor {head.their_weight}: {count} rows, expected "
            f"{len(head.labels)} ({', '.join(head.labels)})"
        )
    return head.labels
