"""The model types that code outside ``attnkit.models`` takes, and capabilities as protocols.

* ``Seq2SeqModel``: a translation model (the registry's ``"seq2seq"`` kind):
  ``forward(src_ids, tgt_ids, *, need_weights, compute_logits) -> Seq2SeqOutput``,
  ``config.max_len``, and the decoding protocol (``start``/``step``).
* ``LanguageModel``: a model scored on a token stream, causal (``DecoderOnlyLM``)
  or masked (``EncoderOnlyModel``).
* ``LinearLogits``: a model whose logits are exactly ``hidden @ W.T`` (no bias,
  nothing in between), so that a loss may project ``hidden`` chunk by chunk
  without ever holding the ``(N, V)`` logits (``attnkit.losses``,
  ``chunked_label_smoothed_cross_entropy``). The encoder-decoder Transformer is
  one; the RNN is not (dropout and a bias come between its features and logits).

A capability is declared by the model (a method) and checked where the
training or decoding strategy is chosen, never guessed from a class name.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from torch import Tensor

from attnkit.models.decoder_only import DecoderOnlyLM
from attnkit.models.encoder_decoder import EncoderDecoder
from attnkit.models.encoder_only import EncoderOnlyModel
from attnkit.models.rnn_seq2seq import RNNSeq2Seq

Seq2SeqModel = EncoderDecoder | RNNSeq2Seq
LanguageModel = DecoderOnlyLM | EncoderOnlyModel


@runtime_checkable
class LinearLogits(Protocol):
    """``logits == forward(..., compute_logits=False).hidden @ logits_weight().T``."""

    def logits_weight(self) -> Tensor:
        """The output projection's weight ``(V, D)`` (tied to an embedding or not)."""
        ...


__all__ = ["LanguageModel", "LinearLogits", "Seq2SeqModel"]
