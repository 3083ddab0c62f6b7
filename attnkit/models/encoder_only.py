"""An encoder-only (BERT-style) model: the paper's encoder stack with two heads.

* a masked-language-model head (Devlin et al., 2019, §3.1): dense, activation,
  LayerNorm, then the output projection tied to the token embedding, plus a
  per-token bias;
* a sequence-classification head: a pooled summary of the sequence (the first
  token, BERT's [CLS], or the mean over real tokens), then BERT's pooler
  (dense + tanh), dropout and a linear layer to ``num_labels`` scores.

Padding (``pad_id``) is found in ``ids`` and masked out of attention and of
mean pooling, so a sequence gets the same outputs however much padding
follows it.

Shapes: ``B`` batch, ``S`` length, ``D`` d_model, ``V`` vocabulary, ``h`` heads.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from attnkit.attention.masks import padding_mask
from attnkit.blocks import Encoder, EncoderLayer, FeedForward, Residual
from attnkit.blocks.feedforward import ACTIVATIONS
from attnkit.models.decoder_only import build_self_attention
from attnkit.models.embeddings import InputEmbedding, TokenEmbedding
from attnkit.models.lm_config import EncoderOnlyConfig
from attnkit.positions import build_positions


@dataclass
class EncoderOnlyOutput:
    """What ``EncoderOnlyModel.forward`` returns.

    Attributes:
        hidden: ``(B, S, D)`` the encoder output.
        mlm_logits: ``(B, S, V)`` token scores (``None`` unless ``mlm=True``).
        class_logits: ``(B, num_labels)`` (``None`` without a classifier or
            unless ``classify=True``).
        attentions: per layer ``(B, h, S, S)``, only on request.
    """

    hidden: Tensor
    mlm_logits: Tensor | None = None
    class_logits: Tensor | None = None
    attentions: list[Tensor] | None = None


class MLMHead(nn.Module):
    """``(..., D) -> (..., V)``: transform, then the (tied) output projection."""

    def __init__(self, d_model: int, vocab_size: int, activation: str):
        super().__init__()
        self.dense = nn.Linear(d_model, d_model)
        self.activation = ACTIVATIONS[activation]
        self.norm = nn.LayerNorm(d_model)
        self.output_proj = nn.Linear(d_model, vocab_size, bias=False)
        self.bias = nn.Parameter(torch.zeros(vocab_size))

    def forward(self, hidden: Tensor) -> Tensor:
        h = self.norm(self.activation(self.dense(hidden)))
        return self.output_proj(h) + self.bias


class ClassificationHead(nn.Module):
    """Pooled sequence ``(B, D)`` -> ``(B, num_labels)`` through BERT's tanh pooler."""

    def __init__(self, d_model: int, num_labels: int, dropout: float):
        super().__init__()
        self.pooler = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(d_model, num_labels)

    def forward(self, pooled: Tensor) -> Tensor:
        return self.classifier(self.dropout(torch.tanh(self.pooler(pooled))))


def pool(hidden: Tensor, real: Tensor, how: str) -> Tensor:
    """Summarise ``hidden`` ``(B, S, D)`` to ``(B, D)``; ``real`` ``(B, S)`` marks non-pad."""
    if how == "first":
        return hidden[:, 0]
    weights = real.to(hidden.dtype)[:, :, None]
    return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1.0)


def build_encoder_stack(c: EncoderOnlyConfig) -> Encoder:
    layers = [
        EncoderLayer(
            self_attn=build_self_attention(c),
            ffn=FeedForward(c.d_model, c.d_ff, c.activation),
            self_attn_residual=Residual(c.d_model, c.dropout, c.norm_position),
            ffn_residual=Residual(c.d_model, c.dropout, c.norm_position),
        )
        for _ in range(c.num_layers)
    ]
    final_norm = nn.LayerNorm(c.d_model) if c.norm_position == "pre" else None
    return Encoder(layers, final_norm)


class EncoderOnlyModel(nn.Module):
    """A BERT-style encoder. Build it from an ``EncoderOnlyConfig``."""

    def __init__(self, config: EncoderOnlyConfig):
        super().__init__()
        c = self.config = config
        self.pad_id, self.mask_id = c.pad_id, c.mask_id
        tokens = TokenEmbedding(c.vocab_size, c.d_model)
        self.embed = InputEmbedding(
            tokens, build_positions(c.absolute_positions, c.max_len, c.d_model), c.dropout
        )
        self.encoder = build_encoder_stack(c)
        self.mlm_head = MLMHead(c.d_model, c.vocab_size, c.activation)
        self.mlm_head.output_proj.weight = tokens.weight  # tied, as in BERT
        self.classifier = (
            ClassificationHead(c.d_model, c.num_labels, c.dropout) if c.num_labels else None
        )
        self._init_weights()

    def _init_weights(self) -> None:
        for module in self.modules():
            if isinstance(module, nn.Linear) and module is not self.mlm_head.output_proj:
                nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)

    def num_parameters(self) -> int:
        """Trainable parameters, counting tied matrices once."""
        return sum(p.numel() for p in self.parameters())

    def forward(
        self,
        ids: Tensor,
        *,
        need_weights: bool = False,
        mlm: bool = True,
        classify: bool = True,
    ) -> EncoderOnlyOutput:
        """Encode ``ids`` ``(B, S)`` (padded with ``pad_id``) and apply the heads.

        Pass ``mlm=False`` when training on masked positions only: project
        ``model.mlm_head(out.hidden[labels != -100])`` instead of all ``B*S``.
        """
        real = ids != self.pad_id
        hidden, weights = self.encoder(
            self.embed(ids), mask=padding_mask(ids, self.pad_id), need_weights=need_weights
        )
        class_logits = None
        if classify and self.classifier is not None:
            class_logits = self.classifier(pool(hidden, real, self.config.pooling))
        return EncoderOnlyOutput(
            hidden=hidden,
            mlm_logits=self.mlm_head(hidden) if mlm else None,
            class_logits=class_logits,
            attentions=weights,
        )
