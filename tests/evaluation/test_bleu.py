"""BLEU/chrF through sacreBLEU: known values and the lowercased variant."""

from __future__ import annotations

import pytest
import sacrebleu

from attnkit.errors import UsageError
from attnkit.evaluation.bleu import corpus_scores

HYPS = ["The cat sat on a mat.", "A dog runs in the park today."]
REFS = ["The cat sat on the mat.", "A dog is running in the park."]


def test_identical_is_100() -> None:
    scores = corpus_scores(REFS, REFS)
    assert scores["bleu"] == pytest.approx(100.0)
    assert scores["bleu_lc"] == pytest.approx(100.0)
    assert scores["chrf"] == pytest.approx(100.0)


def test_matches_sacrebleu_directly() -> None:
    scores = corpus_scores(HYPS, REFS)
    assert scores["bleu"] == pytest.approx(sacrebleu.corpus_bleu(HYPS, [REFS]).score)
    assert scores["chrf"] == pytest.approx(sacrebleu.corpus_chrf(HYPS, [REFS]).score)
    assert 10 < scores["bleu"] < 90
    assert all(type(scores[k]) is float for k in ("bleu", "bleu_lc", "chrf"))
    assert "case:mixed" in scores["bleu_signature"] and "tok:13a" in scores["bleu_signature"]
    assert "case:lc" in scores["bleu_lc_signature"]
    assert scores["chrf_signature"].startswith("nrefs:1")


def test_lowercase_variant_ignores_case() -> None:
    scores = corpus_scores(["the cat sat on the mat ."], ["The Cat sat on the mat ."])
    assert scores["bleu_lc"] == pytest.approx(100.0)
    assert scores["bleu"] < 80


def test_bad_input() -> None:
    with pytest.raises(UsageError, match="2 hypotheses but 1 references"):
        corpus_scores(HYPS, REFS[:1])
    with pytest.raises(UsageError):
        corpus_scores([], [])
