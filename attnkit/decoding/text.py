"""Text in, text out: tokenize, batch by length, search, detokenize.

The searches in this package work on token ids; this is the thin layer that
``attnkit translate``, validation BLEU and the quickstart share.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from attnkit.data.tokenizers import Tokenizer
from attnkit.decoding.beam import beam_search
from attnkit.decoding.common import DecodeResult, Hypothesis, SearchSettings
from attnkit.decoding.greedy import greedy_search
from attnkit.decoding.protocol import AnyStepper
from attnkit.decoding.sampling import sample


def _pad(seqs: Sequence[Sequence[int]], pad_id: int) -> torch.Tensor:
    width = max(len(s) for s in seqs)
    out = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.as_tensor(s, dtype=torch.long)
    return out


def source_ids(tokenizer: Tokenizer, text: str, limit: int) -> list[int]:
    """``text``'s ids cut to ``limit``, then EOS; a blank line is EOS alone (decoded as
    nothing), whatever the tokenizer makes of its spaces."""
    ids = tokenizer.encode(text)[:limit] if text.strip() else []
    return [*ids, tokenizer.eos_id]


def decode_ids(
    model: AnyStepper,
    src: Sequence[Sequence[int]],
    *,
    beam: int = 4,
    alpha: float = 0.6,
    nbest: int = 1,
    sampling: dict[str, Any] | None = None,
    batch_size: int = 64,
    max_len_b: int = 50,
    max_len: int | None = None,
    device: torch.device | str = "cpu",
    search: SearchSettings | None = None,
) -> list[DecodeResult]:
    """Decode token-id sources (each ending in EOS), in length-sorted batches.

    Returns one single-sentence ``DecodeResult`` per source, in input order.
    ``sampling`` (``temperature``/``top_k``/``top_p``/``generator``) selects
    sampling; otherwise ``beam == 1`` is greedy search and ``beam > 1`` beam search.
    A source with no token (an empty or whitespace-only line: EOS alone) has an
    empty output and is not decoded: a model asked to translate nothing should
    not invent a sentence. ``search``: the device's search settings, from the
    inference plan (default: the CPU's).
    """
    results: list[DecodeResult | None] = [None] * len(src)
    for i, s in enumerate(src):
        if all(t == model.eos_id for t in s):
            results[i] = DecodeResult([[]], [0.0], [[Hypothesis([], 0.0)] * max(nbest, 1)])
    todo = [i for i in range(len(src)) if results[i] is None]
    order = sorted(todo, key=lambda i: len(src[i]))
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        ids = _pad([src[i] for i in chunk], model.pad_id).to(device)
        if sampling is not None:
            out = sample(model, ids, **sampling, max_len_b=max_len_b, max_len=max_len,
                         search=search)  # fmt: skip
        elif beam == 1 and nbest == 1:
            out = greedy_search(model, ids, max_len_b=max_len_b, max_len=max_len, search=search)
        else:
            out = beam_search(model, ids, beam_size=beam, alpha=alpha, nbest=nbest,
                              max_len_b=max_len_b, max_len=max_len, search=search)  # fmt: skip
        for row, i in enumerate(chunk):
            results[i] = DecodeResult([out.tokens[row]], [out.scores[row]], [out.nbest[row]])
    return [r for r in results if r is not None]


@torch.no_grad()
def translate_texts(
    model: Any,  # an EncoderDecoder or RNNSeq2Seq; its callers hold it as an nn.Module
    tokenizer: Tokenizer,
    texts: Sequence[str],
    *,
    beam: int = 4,
    alpha: float = 0.6,
    batch_size: int = 64,
    max_len_b: int = 50,
    sampling: dict[str, object] | None = None,
    device: torch.device | str | None = None,
    stepper: AnyStepper,
    search: SearchSettings | None = None,
) -> list[str]:
    """Translate ``texts`` with an encoder-decoder ``model`` and its ``tokenizer``.

    ``stepper`` decodes the model and ``search`` holds the device's search
    settings: both from the inference plan (``attnkit.inference.decoder_for``).
    """
    if not texts:
        return []
    was_training = model.training
    model.eval()
    device = device or next(model.parameters()).device
    max_positions = model.config.max_len
    src = [source_ids(tokenizer, t, max_positions - 1) for t in texts]
    results = decode_ids(
        stepper,
        src,
        beam=beam,
        alpha=alpha,
        sampling=sampling,
        batch_size=batch_size,
        max_len_b=max_len_b,
        max_len=max_positions - 1,  # BOS takes the first position
        device=device,
        search=search,
    )
    model.train(was_training)
    return [tokenizer.decode(r.tokens[0]) for r in results]
