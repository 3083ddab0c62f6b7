"""Configs of the two single-stack families: decoder-only (GPT) and encoder-only (BERT).

Like ``TransformerConfig``, each is one frozen, validated dataclass whose
variants are strings, so it round-trips through JSON inside every checkpoint.
Both share the attention-stack fields (``AttentionStackConfig``: width, heads,
positions, norm position, score function, ...) and change some defaults to
GPT's and BERT's. Presets are data (``attnkit.models.presets``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from attnkit.models.config_base import (
    Activation,
    AttentionStackConfig,
    NormPosition,
    Positions,
    check_special_ids,
)
from attnkit.models.presets import DECODER_ONLY_PRESETS, ENCODER_ONLY_PRESETS
from attnkit.validation import at_least, require

Pooling = Literal["first", "mean"]
# What the labels are of: the whole sequence (sentence classification) or each token
# (named entities; extractive QA, whose two "labels" are an answer's start and end).
LabelLevel = Literal["sequence", "token"]


@dataclass(frozen=True)
class DecoderOnlyConfig(AttentionStackConfig):
    """A GPT-style causal language model.

    ``max_len`` is the context length (nanoGPT's ``block_size``). Defaults are
    GPT-like (pre-LN, GELU, learned positions, tied output projection).
    """

    family: ClassVar[str] = "decoder_only"
    presets: ClassVar[dict[str, dict[str, object]]] = DECODER_ONLY_PRESETS

    activation: Activation = "gelu"
    norm_position: NormPosition = "pre"
    positions: Positions = "learned"
    num_layers: int = 6
    vocab_size: int = 8000
    tie_embeddings: bool = True
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2

    def _check_family(self) -> None:
        at_least(self, ("num_layers",), 1)
        check_special_ids(
            {"pad_id": self.pad_id, "bos_id": self.bos_id, "eos_id": self.eos_id},
            {"vocab_size": self.vocab_size},
        )


@dataclass(frozen=True)
class EncoderOnlyConfig(AttentionStackConfig):
    """A BERT-style bidirectional encoder with an MLM head and a classification head.

    attnkit tokenizers reserve ids 0-3 (pad, BOS, EOS, unk) and have no mask
    token: give the model one more id, ``vocab_size = tokenizer.vocab_size + 1``
    and ``mask_id = tokenizer.vocab_size`` (see ``attnkit.data.mlm.mlm_vocab``).
    ``label_level = "token"`` puts the ``num_labels`` scores on every token instead
    (dropout and one linear layer, as BERT's token-classification and
    question-answering heads; no pooling). ``num_labels = 0`` builds no
    classification head; ``pooling`` picks the
    sequence summary it reads (``"first"`` token, as BERT's [CLS], or the
    ``"mean"`` over real tokens); ``label_names`` (empty, or one per label)
    name its outputs, so a classifier's checkpoint carries its label mapping.
    ``pooler``: the classification head's tanh pooler exists even with
    ``num_labels = 0`` (an imported BERT's pretrained ``pooler.dense``, kept so
    that fine-tuning starts from it, as transformers' does; with labels the
    head always has one). ``type_vocab_size > 0`` adds BERT's token-type (segment) embeddings, one
    row per segment of a sentence pair; 0 (the default, and every checkpoint
    written before the field existed) has none.
    """

    family: ClassVar[str] = "encoder_only"
    presets: ClassVar[dict[str, dict[str, object]]] = ENCODER_ONLY_PRESETS

    activation: Activation = "gelu"
    positions: Positions = "learned"
    max_len: int = 512
    num_layers: int = 6
    vocab_size: int = 8001
    num_labels: int = 2
    pooling: Pooling = "first"
    label_level: LabelLevel = "sequence"
    pooler: bool = False
    label_names: tuple[str, ...] = ()
    type_vocab_size: int = 0
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    mask_id: int = 8000

    def _check_family(self) -> None:
        at_least(self, ("num_layers",), 1)
        at_least(self, ("num_labels", "type_vocab_size"), 0)
        require(
            "label_level",
            self.label_level == "sequence" or self.num_labels >= 1,
            "token: needs num_labels >= 1 (one score per label and token)",
        )
        require(
            "label_names",
            not self.label_names or len(self.label_names) == self.num_labels,
            f"{len(self.label_names)} names for num_labels={self.num_labels}",
        )
        check_special_ids(
            {"pad_id": self.pad_id, "bos_id": self.bos_id, "eos_id": self.eos_id,
             "mask_id": self.mask_id},
            {"vocab_size": self.vocab_size},
        )  # fmt: skip
