"""An encoder-only (BERT-style) model: the paper's encoder stack with two heads.

* a masked-language-model head (Devlin et al., 2019, §3.1): dense, activation,
  LayerNorm, then the output projection tied to the token embedding, plus a
  per-token bias;
* a sequence-classification head: a pooled summary of the sequence (the first
  token, BERT's [CLS], or the mean over real tokens), then BERT's pooler
  (dense + tanh), dropout and a linear layer to ``num_labels`` scores; or, with
  ``label_level="token"``, a token-classification head: ``num_labels`` scores for
  every token (named entities; an extractive answer's start and end).

Padding (``pad_id``) is found in ``ids`` and masked out of attention and of
mean pooling, so a sequence gets the same outputs however much padding
follows it.

Sentence pairs (``[CLS] a [SEP] b [SEP]``): with ``type_vocab_size > 0`` the
model has BERT's token-type (segment) embeddings, added to the input before
its norm; ``token_types`` ``(B, S)`` gives each token's segment (0 for the
first sentence, 1 for the second; all 0 when not given).

Shapes: ``B`` batch, ``S`` length, ``D`` d_model, ``V`` vocabulary, ``h`` heads.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from attnkit.attention.masks import padding_mask
from attnkit.blocks.feedforward import ACTIVATIONS
from attnkit.blocks.moe import MoEAux, merge_aux
from attnkit.models import builders
from attnkit.models.lm_config import EncoderOnlyConfig
from attnkit.roles import Roles


@dataclass
class EncoderOnlyOutput:
    """What ``EncoderOnlyModel.forward`` returns.

    Attributes:
        hidden: ``(B, S, D)`` the encoder output.
        mlm_logits: ``(B, S, V)`` token scores, ``(N, V)`` at ``mlm_positions``
            only, or ``None`` (``mlm=False``).
        class_logits: ``(B, num_labels)`` (``None`` without a classifier or
            unless ``classify=True``).
        token_logits: ``(B, S, num_labels)`` of a token-level head
            (``label_level="token"``; ``None`` otherwise or unless ``classify=True``).
        attentions: per layer ``(B, h, S, S)``, only on request.
    """

    hidden: Tensor
    mlm_logits: Tensor | None = None
    class_logits: Tensor | None = None
    token_logits: Tensor | None = None
    attentions: list[Tensor] | None = None
    moe: MoEAux | None = None


class MLMHead(nn.Module):
    """``(..., D) -> (..., V)``: transform, then the (tied) output projection."""

    def __init__(self, d_model: int, vocab_size: int, activation: str, eps: float = 1e-5):
        super().__init__()
        self.dense = nn.Linear(d_model, d_model)
        self.activation = ACTIVATIONS[activation]
        self.norm = nn.LayerNorm(d_model, eps=eps)  # the config's norm_eps (BERT: 1e-12)
        self.output_proj = nn.Linear(d_model, vocab_size, bias=False)
        self.bias = nn.Parameter(torch.zeros(vocab_size))

    def forward(self, hidden: Tensor) -> Tensor:
        h = self.norm(self.activation(self.dense(hidden)))
        logits: Tensor = self.output_proj(h) + self.bias
        return logits


class ClassificationHead(nn.Module):
    """Pooled sequence ``(B, D)`` -> ``(B, num_labels)`` through BERT's tanh pooler.

    ``num_labels = 0``: the pooler alone (a pretrained one kept for fine-tuning);
    it is then never called.
    """

    def __init__(self, d_model: int, num_labels: int, dropout: float):
        super().__init__()
        self.pooler = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(d_model, num_labels) if num_labels else None

    def roles(self) -> Roles:
        """A task head: a LoRA run trains it in full (PEFT's ``modules_to_save``)."""
        return Roles(parameters={name: "head" for name, _ in self.named_parameters()})

    def forward(self, pooled: Tensor) -> Tensor:
        if self.classifier is None:
            raise ValueError("this classification head has a pooler and no labels (num_labels=0)")
        scores: Tensor = self.classifier(self.dropout(torch.tanh(self.pooler(pooled))))
        return scores


class TokenClassificationHead(nn.Module):
    """Every token ``(B, S, D)`` -> ``(B, S, num_labels)``: dropout, then one linear layer
    (BERT's token-classification head; with two labels, its question-answering head's
    start and end scores)."""

    def __init__(self, d_model: int, num_labels: int, dropout: float):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(d_model, num_labels)

    def roles(self) -> Roles:
        """A task head: a LoRA run trains it in full (PEFT's ``modules_to_save``)."""
        return Roles(parameters={name: "head" for name, _ in self.named_parameters()})

    def forward(self, hidden: Tensor) -> Tensor:
        scores: Tensor = self.classifier(self.dropout(hidden))
        return scores


def pool(hidden: Tensor, real: Tensor, how: str) -> Tensor:
    """Summarise ``hidden`` ``(B, S, D)`` to ``(B, D)``; ``real`` ``(B, S)`` marks non-pad."""
    if how == "first":
        return hidden[:, 0]
    weights = real.to(hidden.dtype)[:, :, None]
    return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1.0)


class EncoderOnlyModel(nn.Module):
    """A BERT-style encoder. Build it from an ``EncoderOnlyConfig``."""

    def __init__(self, config: EncoderOnlyConfig):
        super().__init__()
        c = self.config = config
        self.pad_id, self.mask_id = c.pad_id, c.mask_id
        tokens = builders.token_embedding(c, c.vocab_size)
        self.embed = builders.input_embedding(c, tokens)
        # Segment embeddings start at zero: a fresh model reads a pair as one text
        # until training tells the segments apart (imports overwrite them).
        self.token_types = nn.Embedding(c.type_vocab_size, c.d_model) if c.type_vocab_size else None
        if self.token_types is not None:
            nn.init.zeros_(self.token_types.weight)
        self.encoder = builders.encoder(c, c.num_layers)
        self.mlm_head = MLMHead(c.d_model, c.vocab_size, c.activation, c.norm_eps)
        self.mlm_head.output_proj.weight = tokens.weight  # tied, as in BERT
        by_token = c.label_level == "token"
        self.classifier = (
            ClassificationHead(c.d_model, 0 if by_token else c.num_labels, c.dropout)
            if (c.num_labels and not by_token) or c.pooler
            else None
        )
        self.token_classifier = (
            TokenClassificationHead(c.d_model, c.num_labels, c.dropout) if by_token else None
        )
        builders.init_weights(self, self.mlm_head.output_proj, tied=True, d_model=c.d_model)

    def _segments(self, ids: Tensor, token_types: Tensor | None) -> Tensor | None:
        """The token-type term ``(B, S, D)`` of the input, or ``None`` (nothing to add)."""
        if self.token_types is None:
            if token_types is not None and bool(token_types.any()):
                raise ValueError(
                    "token_types: this model has no segment embeddings (type_vocab_size=0)"
                )
            return None
        if token_types is None:  # one segment: every token is of type 0
            return self.token_types.weight[0].expand(*ids.shape, -1)
        segments: Tensor = self.token_types(token_types)
        return segments

    def num_parameters(self) -> int:
        """Trainable parameters, counting tied matrices once."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    def forward(
        self,
        ids: Tensor,
        *,
        need_weights: bool = False,
        mlm: bool = True,
        classify: bool = True,
        mlm_positions: Tensor | None = None,
        token_types: Tensor | None = None,
    ) -> EncoderOnlyOutput:
        """Encode ``ids`` ``(B, S)`` (padded with ``pad_id``) and apply the heads.

        ``mlm_positions`` ``(B, S)`` bool: score only those positions, so
        ``mlm_logits`` is ``(N, V)`` for the ``N`` selected ones (training on
        the masked ~15% projects 15% of the ``B*S`` rows). ``mlm=False``: no
        MLM logits at all (a classifier's training and inference).
        ``token_types`` ``(B, S)``: segment ids (see the module doc); a model
        without segment embeddings accepts only zeros or ``None``.
        """
        real = ids != self.pad_id
        encoded = self.encoder(
            self.embed(ids, extra=self._segments(ids, token_types)),
            mask=padding_mask(ids, self.pad_id),
            need_weights=need_weights,
        )
        hidden = encoded.hidden
        class_logits = None
        token_logits = None
        if classify and self.token_classifier is not None:
            token_logits = self.token_classifier(hidden)
        elif classify and self.classifier is not None and self.config.num_labels:
            class_logits = self.classifier(pool(hidden, real, self.config.pooling))
        mlm_logits = None
        if mlm:
            mlm_logits = self.mlm_head(hidden if mlm_positions is None else hidden[mlm_positions])
        return EncoderOnlyOutput(
            hidden=hidden,
            mlm_logits=mlm_logits,
            class_logits=class_logits,
            token_logits=token_logits,
            attentions=encoded.attentions,
            moe=merge_aux(encoded.aux),
        )
