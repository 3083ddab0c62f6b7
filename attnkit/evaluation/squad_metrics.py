"""SQuAD's exact match and F1, as its official script (``evaluate-v1.1.py``) defines them.

An answer and each gold answer are normalised the script's way: lower-cased,
punctuation removed (Python's ``string.punctuation``), the articles "a",
"an" and "the" removed as whole words, whitespace collapsed. Exact match is
1 when the normalised prediction equals a normalised gold answer; F1 is the
best, over the gold answers, of the token F1 on whitespace tokens (common
tokens counted as a multiset). Both are averaged over the questions and
given as percentages (0-100), as the script prints them.

An unanswerable question (SQuAD v2.0: no gold answers) has the one gold
answer ``""``; an empty prediction or gold then scores 1 only when both are
empty (``evaluate-v2.0.py``'s rule, the same as v1.1's for answerable questions).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """Lower-case, drop punctuation, drop articles, collapse whitespace (in that order)."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def token_f1(prediction: str, gold: str) -> float:
    """The F1 of the normalised whitespace tokens of ``prediction`` against ``gold``."""
    predicted, wanted = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not predicted or not wanted:
        return float(predicted == wanted)
    common = sum((Counter(predicted) & Counter(wanted)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(wanted)
    return 2 * precision * recall / (precision + recall)


def squad_scores(predictions: Sequence[str], golds: Sequence[Sequence[str]]) -> dict[str, float]:
    """``exact_match`` and ``f1`` in percent over the questions (each: the max over its
    gold answers; no gold answers: ``[""]``)."""
    if len(predictions) != len(golds):
        raise ValueError(f"{len(predictions)} predictions for {len(golds)} questions")
    em = f1 = 0.0
    for prediction, answers in zip(predictions, golds):
        gold = list(answers) or [""]
        em += max(exact_match(prediction, g) for g in gold)
        f1 += max(token_f1(prediction, g) for g in gold)
    n = max(len(predictions), 1)
    return {"exact_match": 100.0 * em / n, "f1": 100.0 * f1 / n}
