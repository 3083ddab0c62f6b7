"""ROUGE-1, ROUGE-2 and ROUGE-L F-measures (0-100) through Google's ``rouge-score``.

The summarization papers (PEGASUS, BART, Zhang and Tetreault's AESLC) report
``rouge-score`` with Porter stemming (``use_stemmer=True``): each
hypothesis is scored against its reference (lowercased, tokenized on
non-alphanumerics, stemmed) and the per-example F-measures are averaged.
ROUGE-L here is sentence-level LCS (``rougeL``), not the summary-level
``rougeLsum``: a subject line or short summary is one sentence.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from attnkit.errors import AttnkitError, UsageError

if TYPE_CHECKING:
    from rouge_score.rouge_scorer import RougeScorer  # untyped: unchecked calls

ROUGE_KEYS = ("rouge1", "rouge2", "rougeL")


def _scorer() -> RougeScorer:
    try:
        from rouge_score import rouge_scorer
    except ImportError:
        raise AttnkitError(
            "ROUGE needs the 'rouge-score' package: pip install 'attnkit[train]'"
        ) from None
    return rouge_scorer.RougeScorer(list(ROUGE_KEYS), use_stemmer=True)


def rouge_scores(hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, float]:
    """``{"rouge1", "rouge2", "rougeL"}``: the mean F-measure over the pairs, times 100."""
    if len(hypotheses) != len(references):
        raise UsageError(f"ROUGE: {len(hypotheses)} hypotheses but {len(references)} references")
    if not references:
        raise UsageError("ROUGE: no pairs to score")
    scorer = _scorer()
    totals = dict.fromkeys(ROUGE_KEYS, 0.0)
    for hyp, ref in zip(hypotheses, references):
        scores = scorer.score(ref, hyp)  # rouge-score's order: target first
        for key in ROUGE_KEYS:
            totals[key] += scores[key].fmeasure
    return {key: 100.0 * total / len(references) for key, total in totals.items()}
