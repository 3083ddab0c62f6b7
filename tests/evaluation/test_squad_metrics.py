"""SQuAD's official exact match and F1, checked by hand on made-up answers."""

from __future__ import annotations

import pytest

from attnkit.evaluation.squad_metrics import (
    exact_match,
    normalize_answer,
    squad_scores,
    token_f1,
)


def test_normalisation_lowercases_and_drops_punctuation_articles_and_spaces():
    assert normalize_answer("The  Quick, brown fox!") == "quick brown fox"
    assert normalize_answer("an apple and a pear") == "apple and pear"
    assert normalize_answer("Theatre") == "theatre"  # "the" only as a whole word
    assert normalize_answer("U.S.A.") == "usa"


def test_exact_match_and_f1_by_hand():
    assert exact_match("Cat on the mat.", "cat on mat") == 1.0
    assert exact_match("cat on a mat", "cat on mats") == 0.0
    # "cat sat on mat" vs "cat on mat": 3 common; precision 3/4, recall 1 -> 6/7
    assert token_f1("the cat sat on a mat", "cat on the mat") == pytest.approx(6 / 7)
    # tokens are a multiset: "cat cat" vs "cat" -> 1 common; P 1/2, R 1 -> 2/3
    assert token_f1("the cat cat", "a cat") == pytest.approx(2 / 3)
    assert token_f1("Paris", "London") == 0.0
    assert token_f1("", "London") == 0.0 and token_f1("", "") == 1.0


def test_scores_take_the_best_gold_answer_and_are_percentages():
    scores = squad_scores(
        ["Denver Broncos", "in 1889", "Paris", "", "anything"],
        [["Denver Broncos", "The Denver Broncos"], ["1889"], ["London"], [], []],
    )
    # EM: 1, 0, 0, 1 (no answer, none predicted), 0 -> 2/5
    assert scores["exact_match"] == pytest.approx(40.0)
    # F1: 1, 2/3 (P 1/2, R 1), 0, 1, 0 -> (8/3)/5
    assert scores["f1"] == pytest.approx(100 * (8 / 3) / 5)
    with pytest.raises(ValueError, match="2 predictions for 1 questions"):
        squad_scores(["a", "b"], [["a"]])
