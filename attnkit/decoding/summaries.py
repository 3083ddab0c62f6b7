"""Summaries of texts from an encoder-decoder or a decoder-only checkpoint.

* An encoder-decoder (``EncoderDecoder``, ``RNNSeq2Seq``) reads the text cut
  to ``text_tokens`` (default: its positions) and writes the summary, by
  greedy or beam search (``attnkit.decoding.text.decode_ids``), at most
  ``max_tokens`` tokens.
* A decoder-only LM is given the instruction prompt
  (``attnkit.data.summaries.prompt_text``: the text cut to ``text_tokens``, in
  the chat template) and continues it greedily (or by sampling) until its
  end-of-sequence token, at most ``max_tokens`` new tokens, one text at a
  time (prompts differ in length; no left padding).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from attnkit.data.summaries import prompt_text
from attnkit.data.tokenizers import Tokenizer
from attnkit.decoding.generate import generate
from attnkit.decoding.text import decode_ids, source_ids
from attnkit.errors import UsageError
from attnkit.inference.prepare import stepper_for

# A decoder-only model's default cut of the text (its context may be far longer).
DECODER_TEXT_TOKENS = 448


def is_decoder_only(model: Any) -> bool:
    return getattr(model.config, "family", None) == "decoder_only"


def summarize_texts(
    model: Any,  # an EncoderDecoder, RNNSeq2Seq or DecoderOnlyLM, held as an nn.Module
    tokenizer: Tokenizer,
    texts: Sequence[str],
    *,
    beam: int = 4,
    alpha: float = 0.6,
    max_tokens: int = 32,
    text_tokens: int | None = None,
    batch_size: int = 32,
    device: torch.device | str | None = None,
) -> list[str]:
    """One summary per text (``""`` for a blank one), in order; see the module doc."""
    if not texts:
        return []
    if max_tokens < 1:
        raise UsageError(f"max_tokens must be >= 1, got {max_tokens}")
    was_training = model.training
    model.eval()
    device = device or next(model.parameters()).device
    try:
        if is_decoder_only(model):
            if beam != 1:
                raise UsageError("a decoder-only model summarizes greedily: use beam 1")
            return [_continue(model, tokenizer, t, max_tokens, text_tokens, device) for t in texts]
        positions = int(model.config.max_len)
        limit = min(text_tokens or positions - 1, positions - 1)
        src = [source_ids(tokenizer, t, limit) for t in texts]
        results = decode_ids(
            stepper_for(model), src, beam=beam, alpha=alpha, batch_size=batch_size,
            max_len=min(max_tokens, positions - 1), device=device,
        )  # fmt: skip
        return [tokenizer.decode(r.tokens[0]).strip() for r in results]
    finally:
        model.train(was_training)


@torch.no_grad()
def _continue(
    model: Any,
    tokenizer: Tokenizer,
    text: str,
    max_tokens: int,
    text_tokens: int | None,
    device: torch.device | str,
) -> str:
    if not text.strip():
        return ""
    prompt = tokenizer.encode(
        prompt_text(tokenizer, text, text_tokens=text_tokens or DECODER_TEXT_TOKENS)
    )
    ids = torch.tensor([prompt], dtype=torch.long, device=device)
    out = generate(model, ids, max_tokens, temperature=0.0, eos_id=model.eos_id,
                   stepper=stepper_for(model))  # fmt: skip
    new = [int(t) for t in out[0, len(prompt) :].tolist() if int(t) != model.eos_id]
    return tokenizer.decode(new).strip()
