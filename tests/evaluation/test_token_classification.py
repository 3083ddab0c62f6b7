"""Entity-level scores: seqeval's figures on a made-up example, checked by hand too."""

from __future__ import annotations

import pytest
from seqeval.metrics import f1_score, precision_score, recall_score

from attnkit.evaluation.token_classification import entity_scores, is_tagger

GOLD = [
    ["B-PER", "I-PER", "O", "B-LOC", "O"],
    ["B-ORG", "I-ORG", "I-ORG", "O", "B-PER"],
    ["O", "B-LOC", "B-LOC", "O"],
]
PREDICTED = [
    ["B-PER", "I-PER", "O", "B-LOC", "O"],  # both right
    ["B-ORG", "I-ORG", "O", "O", "B-LOC"],  # the ORG span too short, the PER typed LOC
    ["O", "B-LOC", "I-LOC", "I-PER"],  # two LOCs merged into one; a spurious PER
]


def test_scores_are_seqeval_entity_scores():
    scores = entity_scores(GOLD, PREDICTED)
    # by hand: 6 gold entities, 6 predicted, 2 of them exactly right (type and span)
    assert scores["precision"] == pytest.approx(2 / 6)
    assert scores["recall"] == pytest.approx(2 / 6)
    assert scores["f1"] == pytest.approx(2 / 6)
    assert scores["f1"] == pytest.approx(f1_score(GOLD, PREDICTED))
    assert scores["precision"] == pytest.approx(precision_score(GOLD, PREDICTED))
    assert scores["recall"] == pytest.approx(recall_score(GOLD, PREDICTED))
    per = scores["per_type"]
    assert set(per) == {"LOC", "ORG", "PER"}
    assert per["PER"]["support"] == 2 and per["PER"]["recall"] == pytest.approx(0.5)
    assert per["PER"]["precision"] == pytest.approx(0.5)
    assert per["ORG"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1}
    assert per["LOC"]["support"] == 3 and per["LOC"]["recall"] == pytest.approx(1 / 3)
    assert per["LOC"]["precision"] == pytest.approx(1 / 3)


def test_perfect_and_empty_predictions():
    assert entity_scores(GOLD, GOLD)["f1"] == 1.0
    nothing = entity_scores(GOLD, [["O"] * len(g) for g in GOLD])
    assert nothing["f1"] == 0.0 and nothing["recall"] == 0.0


def test_a_tagger_is_told_from_other_token_heads():
    class Config:
        label_level = "token"
        label_names = ("O", "B-PER", "I-PER")

    assert is_tagger(Config())
    Config.label_names = ("start", "end")  # extractive QA
    assert not is_tagger(Config())
    Config.label_level, Config.label_names = "sequence", ("O", "B-PER", "I-PER")
    assert not is_tagger(Config())
