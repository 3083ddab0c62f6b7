"""An attnkit encoder with a token-level head as transformers' ``BertForTokenClassification``
or ``BertForQuestionAnswering`` (``attnkit export --to hf`` of a ``task:
token_classification`` or ``task: question_answering`` checkpoint).

The keys run through the tables the import reads (``attnkit.interop.hf.bert``'s
``BERT_LAYERS``, positions and token types under ``bert.``; the head's rule from
``attnkit.interop.hf.bert_heads``), backwards (``keymap.save_state``). The MLM
head every ``EncoderOnlyModel`` carries is not written (neither class has one).
``config.json`` gets ``architectures`` (the class), ``id2label``/``label2id``
from ``label_names`` (QA: start, end) and BERT's sizes; a model without
segment embeddings is written with two zero rows of them (type 0 then adds
nothing, as in attnkit).

What BERT cannot express (pre-LN, RMSNorm, rotary or sinusoidal positions,
scaled embeddings, grouped-query attention, SwiGLU, ...) is refused by
``check_bert_expressible`` with a ``ConfigError`` naming the config field.
Shapes: ``D`` d_model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from attnkit.errors import ConfigError
from attnkit.evaluation.question_answering import is_qa_config
from attnkit.interop.conventions import HF_ACTIVATIONS, activation_to_hf
from attnkit.interop.hf.bert import (
    BERT_FIELDS,
    BERT_LAYERS,
    BERT_POSITIONS_ONLY,
    BERT_TOKEN_TYPES,
)
from attnkit.interop.hf.bert_heads import (
    HEAD_KEY,
    QUESTION_ANSWERING,
    TOKEN_CLASSIFICATION,
    TaskHead,
    labels_to_hf,
)
from attnkit.interop.keymap import check_keys, save_state
from attnkit.interop.keytable import Dims, Table
from attnkit.models.encoder_only import EncoderOnlyModel
from attnkit.models.lm_config import EncoderOnlyConfig

if TYPE_CHECKING:
    from transformers import PreTrainedModel

ENCODER = Table("BertModel", (*BERT_LAYERS, BERT_POSITIONS_ONLY, BERT_TOKEN_TYPES))
_ENCODER_PREFIXES = ("embed.", "encoder.", "token_types.")
# attnkit field -> the value BERT has; anything else has no BertConfig field.
_BERT_FIELDS: tuple[tuple[str, object], ...] = (
    ("norm_position", "post"), ("norm", "layernorm"), ("positions", "learned"),
    ("scale_embeddings", False), ("embedding_norm", True), ("bias", True),
    ("attention", "dense"), ("attention_score", "scaled_dot"), ("ffn", "dense"),
    ("key_dim", None),
)  # fmt: skip


def check_bert_expressible(config: object) -> EncoderOnlyConfig:
    """``config`` if BERT's token-level classes can hold its model, else ``ConfigError``
    naming the field."""
    if not isinstance(config, EncoderOnlyConfig):
        family = getattr(config, "family", type(config).__name__)
        raise ConfigError(f"family: {family!r} is not an encoder-only model")
    if config.label_level != "token":
        raise ConfigError(
            "label_level: export --to hf writes an encoder's token-level heads "
            "(BertForTokenClassification, BertForQuestionAnswering); this model has "
            f"{config.label_level!r} labels"
        )
    for name, want in _BERT_FIELDS:
        got = getattr(config, name)
        if got != want:
            raise ConfigError(f"{name}: BERT needs {name}={want!r}; this model has {got!r}")
    if config.num_kv_heads not in (None, config.num_heads):
        raise ConfigError(
            f"num_kv_heads: BERT has one key/value head per query head ({config.num_heads}); "
            f"this model has {config.num_kv_heads}"
        )
    if config.activation not in HF_ACTIVATIONS.values():
        raise ConfigError(f"activation: BERT has no FFN for {config.activation!r}")
    return config


def task_head_for(config: EncoderOnlyConfig) -> TaskHead:
    """QA's ``qa_outputs`` for a start/end head, else the token classifier's ``classifier``."""
    return QUESTION_ANSWERING if is_qa_config(config) else TOKEN_CLASSIFICATION


def to_hf_bert(model: EncoderOnlyModel) -> PreTrainedModel:
    """A ``BertForTokenClassification`` / ``BertForQuestionAnswering`` holding a copy of
    ``model``'s weights, in eval mode: the same logits for the same ids and
    ``attention_mask = ids != pad_id`` (token types: the same ones, or none).
    Needs ``transformers``; ``ConfigError`` for a model BERT cannot express."""
    from transformers import BertConfig, BertForQuestionAnswering, BertForTokenClassification

    c = check_bert_expressible(model.config)
    head = task_head_for(c)
    state = {k: v.detach().float() for k, v in model.state_dict().items()}
    ours = {k: v for k, v in state.items() if k.startswith(_ENCODER_PREFIXES)}
    # No segment embeddings: two zero rows, so type 0 (transformers' default) adds nothing.
    types = ours.setdefault("token_types.weight", torch.zeros(2, c.d_model))
    id2label, label2id = labels_to_hf(c.label_names, c.num_labels)
    config = BertConfig(
        vocab_size=c.vocab_size, hidden_size=c.d_model, num_hidden_layers=c.num_layers,
        num_attention_heads=c.num_heads, intermediate_size=c.d_ff,
        hidden_act=activation_to_hf(c.activation), hidden_dropout_prob=c.dropout,
        attention_probs_dropout_prob=c.attention_dropout, max_position_embeddings=c.max_len,
        type_vocab_size=int(types.size(0)), layer_norm_eps=c.norm_eps, pad_token_id=c.pad_id,
        id2label=id2label, label2id=label2id, architectures=[head.architecture],
    )  # fmt: skip
    hf_class = (
        BertForQuestionAnswering if head is QUESTION_ANSWERING else BertForTokenClassification
    )
    hf = hf_class(config)
    values = {"D": c.d_model, "F": c.d_ff, "V": c.vocab_size, "P": c.max_len,
              "T": int(types.size(0)), "i": c.num_layers, "C": c.num_labels}  # fmt: skip
    dims = Dims(values, BERT_FIELDS, "the checkpoint's config")
    encoder = save_state(ENCODER, ours, dims)
    head_state = {k: v for k, v in state.items() if k.startswith(f"{HEAD_KEY}.")}
    mapped = {f"bert.{k}": v for k, v in encoder.items()}
    mapped |= save_state(Table(head.architecture, (head.rule,)), head_state, dims)
    check_keys(hf.state_dict(), mapped, f"{head.architecture} state dict")
    with torch.no_grad():
        hf.load_state_dict(mapped, strict=True)
    return hf.eval()
