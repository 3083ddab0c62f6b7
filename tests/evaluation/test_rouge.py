"""ROUGE-1/2/L: the mean per-example F-measure of rouge-score with stemming, times 100."""

from __future__ import annotations

import pytest
from rouge_score import rouge_scorer

from attnkit.errors import UsageError
from attnkit.evaluation.rouge import rouge_scores

HYPS = ["meeting tomorrow at noon", "Gas prices for June", "", "re: contracts signed"]
REFS = ["Meeting Tomorrow", "June gas pricing", "Q3 report", "Contract signing"]


def test_equals_rouge_score_with_stemming():
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)
    ours = rouge_scores(HYPS, REFS)
    for key in ("rouge1", "rouge2", "rougeL"):
        want = sum(scorer.score(r, h)[key].fmeasure for h, r in zip(HYPS, REFS)) / len(REFS)
        assert ours[key] == pytest.approx(100 * want, abs=1e-9)
    # stemming counts "signing"/"signed" and "pricing"/"prices" as the same word
    assert 0 < ours["rouge1"] < 100 and ours["rouge2"] < ours["rouge1"]


def test_identical_is_100_and_length_mismatch_is_an_error():
    assert rouge_scores(["a b c"], ["a b c"]) == {"rouge1": 100.0, "rouge2": 100.0, "rougeL": 100.0}
    with pytest.raises(UsageError, match="2 hypotheses but 1 references"):
        rouge_scores(["a", "b"], ["a"])
