"""Extractive answers from a start/end head: span decoding across windows, and scores.

One place for the question-answering task's validation, ``attnkit answer``,
``attnkit evaluate --labelled`` and the server's ``/v1/answer``.

A QA checkpoint is an encoder-only model with a token-level head of two
labels, ``start`` and ``end`` (``EncoderOnlyConfig.label_level="token"``,
BERT's ``qa_outputs``). In every window the candidate spans are the pairs
of context tokens ``i <= j`` with ``j - i < max_answer_len``, scored by the
sum of the start logit of ``i`` and the end logit of ``j`` (as transformers'
``run_qa.py``); the best ``top_k`` of each window are computed exactly (the
whole band of the ``S x S`` score matrix, no n-best cut of starts and ends
first), mapped to the context's characters through the tokenizer's offsets,
and the best over the example's windows win (a span seen in two overlapping
windows counts once, at its higher score). ``probability`` is the span's
start probability times its end probability within its window (softmax over
the window's context tokens), as transformers' pipeline reports it.

With ``allow_null`` (SQuAD v2.0), the answer is empty when the ``[CLS]``
score, start plus end logit at position 0 (the lowest over the windows), beats
the best span.

Shapes: ``B`` windows, ``S`` longest window, ``k`` spans per window.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from attnkit.data.classification import sorted_batches
from attnkit.data.qa_windows import Windows, collate_windows, make_windows
from attnkit.data.squad import QAExample
from attnkit.data.tokenizers import Tokenizer
from attnkit.evaluation.squad_metrics import squad_scores

LABELS = ("start", "end")
MAX_ANSWER_TOKENS = 30  # run_qa.py's max_answer_length


@dataclass(frozen=True)
class Answer:
    """A span of the context: ``context[start:end]`` is ``text``."""

    text: str
    probability: float
    start: int
    end: int
    logit: float


def is_qa_config(config: object) -> bool:
    """Whether a model config is an extractive QA model (token head labelled start, end)."""
    return (getattr(config, "label_level", None) == "token"
            and tuple(getattr(config, "label_names", ())) == LABELS)  # fmt: skip


def span_logits(model: nn.Module, ids: Tensor, token_types: Tensor | None) -> tuple[Tensor, Tensor]:
    """``(B, S)`` start and ``(B, S)`` end logits of a QA model (no MLM head computed)."""
    if token_types is not None and getattr(model.config, "type_vocab_size", 0) == 0:
        token_types = None  # a model without segment embeddings reads [SEP] only
    out: Any = model(ids, mlm=False, token_types=token_types)
    logits: Tensor = out.token_logits
    return logits[..., 0], logits[..., 1]


def best_spans(
    start: Tensor, end: Tensor, context: Tensor, *, max_answer_len: int, top_k: int
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The ``top_k`` best spans of each window.

    Args:
        start, end: ``(B, S)`` logits.
        context: ``(B, S)`` bool, where a span may lie.
    Returns:
        ``(B, k)`` logit sums (``-inf``: fewer than ``k`` spans exist), first and last
        positions, and probabilities (module doc); ``k = min(top_k, S * S)``.
    """
    start, end = start.float(), end.float()
    size = start.size(1)
    band = torch.ones(size, size, dtype=torch.bool, device=start.device).triu()
    band &= ~band.triu(max_answer_len)  # j - i < max_answer_len
    valid = band & context[:, :, None] & context[:, None, :]
    scores = (start[:, :, None] + end[:, None, :]).masked_fill(~valid, float("-inf"))
    k = min(top_k, size * size)
    best, flat = scores.flatten(1).topk(k, dim=-1)
    first, last = flat // size, flat % size
    log_start = start.masked_fill(~context, float("-inf")).log_softmax(-1)
    log_end = end.masked_fill(~context, float("-inf")).log_softmax(-1)
    prob = (log_start.gather(1, first) + log_end.gather(1, last)).exp()
    return best, first, last, prob.nan_to_num(0.0)


@torch.no_grad()
def window_logits(
    model: nn.Module, windows: Windows, tokenizer: Tokenizer, *, batch_size: int = 64
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Every window's start and end logits (fp32 numpy, unpadded), in eval mode
    (restored after), in length-sorted batches on the model's device."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    out: list[tuple[np.ndarray, np.ndarray]] = [(np.empty(0), np.empty(0))] * len(windows)
    try:
        for rows in sorted_batches(windows.lengths.tolist(), batch_size):
            batch = collate_windows(windows, rows, tokenizer).to(device)
            start, end = span_logits(model, batch.ids, batch.token_types)
            starts, ends = start.float().cpu().numpy(), end.float().cpu().numpy()
            for r, w in enumerate(rows):
                n = int(windows.lengths[w])
                out[w] = (starts[r, :n], ends[r, :n])
    finally:
        model.train(was_training)
    return out


def decode_answers(
    windows: Windows,
    logits: Sequence[tuple[np.ndarray, np.ndarray]],
    examples: Sequence[QAExample],
    *,
    max_answer_len: int | Sequence[int] = MAX_ANSWER_TOKENS,
    top_k: int = 1,
    allow_null: bool = False,
) -> list[list[Answer]]:
    """Each example's ``top_k`` answers, best first, from its windows' logits (module doc).

    ``max_answer_len``: one for all, or one per example. An example with no possible
    span (or whose ``[CLS]`` wins, with ``allow_null``) gets the empty answer at
    probability 0.
    """
    limits = ([max_answer_len] * len(examples) if isinstance(max_answer_len, int)
              else list(max_answer_len))  # fmt: skip
    found: list[dict[tuple[int, int], Answer]] = [{} for _ in examples]
    null = [float("inf")] * len(examples)
    for w in range(len(windows)):
        e = int(windows.example[w])
        start, end = (torch.from_numpy(x)[None] for x in logits[w])
        first = windows.context_start(w)
        a, b = (int(x) for x in windows.span[w])
        context = torch.zeros_like(start, dtype=torch.bool)
        context[0, first : first + b - a] = True
        null[e] = min(null[e], float(start[0, 0] + end[0, 0]))
        best, i, j, prob = best_spans(start, end, context, max_answer_len=limits[e],
                                      top_k=top_k)  # fmt: skip
        offsets = windows.offsets[int(windows.context_of[e])]
        text = examples[e].context
        for score, s, t, p in zip(best[0].tolist(), i[0].tolist(), j[0].tolist(),
                                  prob[0].tolist()):  # fmt: skip
            if score == float("-inf"):
                break
            lo, hi = int(offsets[a + s - first][0]), int(offsets[a + t - first][1])
            while lo < hi and text[lo].isspace():  # a word-start marker's space (BPE)
                lo += 1
            if lo == hi:  # only a space: no answer text
                continue
            key = (lo, hi)
            if key not in found[e] or found[e][key].logit < score:
                found[e][key] = Answer(text[lo:hi], p, lo, hi, score)
    results = []
    for e, spans in enumerate(found):
        ranked = sorted(spans.values(), key=lambda x: -x.logit)[:top_k]
        if not ranked or (allow_null and null[e] > ranked[0].logit):
            ranked = [Answer("", 0.0, 0, 0, null[e] if ranked else float("-inf"))]
        results.append(ranked)
    return results


def predict_answers(
    model: nn.Module,
    tokenizer: Tokenizer,
    examples: Sequence[QAExample],
    *,
    max_len: int,
    stride: int,
    batch_size: int = 64,
    max_answer_len: int = MAX_ANSWER_TOKENS,
    top_k: int = 1,
    allow_null: bool = False,
) -> list[list[Answer]]:
    """Window ``examples``, run the model and decode each one's answers."""
    windows = make_windows(tokenizer, examples, max_len=max_len, stride=stride)
    logits = window_logits(model, windows, tokenizer, batch_size=batch_size)
    return decode_answers(windows, logits, examples, max_answer_len=max_answer_len,
                          top_k=top_k, allow_null=allow_null)  # fmt: skip


def qa_scores(
    answers: Sequence[Sequence[Answer]], examples: Sequence[QAExample]
) -> dict[str, float]:
    """SQuAD's ``exact_match`` and ``f1`` (percentages) of the best answers."""
    return squad_scores([a[0].text for a in answers], [x.answers for x in examples])
