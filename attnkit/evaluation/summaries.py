"""Score a summarizer on labelled pairs: its summaries' ROUGE against the references.

What ``attnkit evaluate --labelled FILE`` reports for an encoder-decoder or
decoder-only checkpoint (``task: summarization``): ROUGE-1/2/L F-measures
(``attnkit.evaluation.rouge``, 0-100) of the summaries
``attnkit.decoding.summaries.summarize_texts`` writes for the texts.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from attnkit.data.tokenizers import Tokenizer
from attnkit.decoding.summaries import summarize_texts
from attnkit.evaluation.rouge import rouge_scores


def score_summaries(
    model: Any, tokenizer: Tokenizer, pairs: Sequence[tuple[str, str]], **options: Any
) -> tuple[dict[str, object], list[str]]:
    """``({"rouge1", "rouge2", "rougeL", "examples", "seconds", "examples_per_s"},
    summaries)``; ``options`` are ``summarize_texts``' (beam, max_tokens, ...)."""
    start = time.perf_counter()
    hyps = summarize_texts(model, tokenizer, [t for t, _ in pairs], **options)
    seconds = time.perf_counter() - start
    scores: dict[str, Any] = rouge_scores(hyps, [s for _, s in pairs])
    scores.update(examples=len(pairs), seconds=round(seconds, 2),
                  examples_per_s=round(len(pairs) / max(seconds, 1e-9), 2))  # fmt: skip
    return scores, hyps
