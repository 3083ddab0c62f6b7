"""Span decoding on hand-made logits: the best valid span in a window (end >= start,
inside the context, at most max_answer_len tokens), n-best, and across windows."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnkit.data.qa_windows import make_windows
from attnkit.data.squad import QAExample
from attnkit.data.tokenizers import CharTokenizer
from attnkit.evaluation.question_answering import best_spans, decode_answers

NEG = -10.0


def _window(start_peaks: dict[int, float], end_peaks: dict[int, float], size: int = 10):
    start, end = torch.full((1, size), NEG), torch.full((1, size), NEG)
    for i, v in start_peaks.items():
        start[0, i] = v
    for i, v in end_peaks.items():
        end[0, i] = v
    context = torch.zeros(1, size, dtype=torch.bool)
    context[0, 3:9] = True  # [CLS] q q [SEP] c c c c c c [SEP]
    return start, end, context


def test_the_best_span_is_valid_and_inside_the_context():
    # the highest start is in the question (1), the highest end before the best start (3)
    start, end, context = _window({1: 9.0, 5: 4.0, 6: 3.0}, {3: 9.0, 7: 2.0, 8: 1.0})
    best, i, j, prob = best_spans(start, end, context, max_answer_len=30, top_k=3)
    assert (i[0].tolist(), j[0].tolist()) == ([5, 6, 5], [7, 7, 8])
    assert best[0].tolist() == pytest.approx([6.0, 5.0, 5.0])
    assert 0 < prob[0, 0] <= 1 and prob[0, 0] > prob[0, 1]


def test_max_answer_len_shortens_the_span():
    start, end, context = _window({3: 5.0, 6: 1.0}, {8: 5.0, 4: 1.0})
    _, i, j, _ = best_spans(start, end, context, max_answer_len=30, top_k=1)
    assert (int(i[0, 0]), int(j[0, 0])) == (3, 8)
    _, i, j, _ = best_spans(start, end, context, max_answer_len=3, top_k=1)
    assert (int(i[0, 0]), int(j[0, 0])) == (3, 4)  # 3..8 is 6 tokens; 3..4 is the best of <= 3


def test_fewer_spans_than_asked_are_minus_infinity():
    start, end, context = _window({}, {})
    context[:] = False
    context[0, 4] = True
    best, *_ = best_spans(start, end, context, max_answer_len=30, top_k=3)
    assert best[0, 0] == pytest.approx(2 * NEG) and torch.isinf(best[0, 1:]).all()


def test_the_best_span_over_windows_maps_back_to_characters():
    tok = CharTokenizer.train(["abcdefghijklmnopqrstuvwxyz ?"])
    context = "the answer is somewhere in this long context ok"
    example = QAExample("1", "q?", context, (), (), "test")
    windows = make_windows(tok, [example], max_len=24, stride=8)
    assert len(windows) >= 3
    target = context.index("long")  # characters = tokens for a char tokenizer
    logits = []
    for w in range(len(windows)):
        n = int(windows.lengths[w])
        start, end = np.full(n, NEG, np.float32), np.full(n, NEG, np.float32)
        a, b = windows.span[w]
        first = windows.context_start(w)
        if a <= target and target + 3 < b:  # "long" lies in this window
            start[first + target - a] = 3.0 + w  # the later window scores higher
            end[first + target + 3 - a] = 3.0
        # a decoy everywhere: "the", weaker
        if a == 0:
            start[first], end[first + 2] = 2.0, 2.0
        logits.append((start, end))
    (answers,) = decode_answers(windows, logits, [example], top_k=5)
    assert answers[0].text == "long" and context[answers[0].start : answers[0].end] == "long"
    assert [a.text for a in answers].count("long") == 1  # seen in two windows, counted once
    assert "the" in [a.text for a in answers]
    nulls = []  # [CLS] scores 5 in every window, every span 0
    for start, end in logits:
        start, end = np.zeros_like(start), np.zeros_like(end)
        start[0] = 5.0
        nulls.append((start, end))
    (null,) = decode_answers(windows, nulls, [example], allow_null=True)
    assert null[0].text == "" and null[0].logit == 5.0
    (forced,) = decode_answers(windows, nulls, [example])  # SQuAD v1.1: always a span
    assert forced[0].text != ""
