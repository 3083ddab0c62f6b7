"""Synthetic explorer examples with known alignments, for the payload and browser tests."""

from __future__ import annotations

import numpy as np

from attnkit.visualize.explorer import AttentionGroup, ExplorerExample, Hypothesis

SOURCE = "Zwei junge Männer spielen im Park Fußball . </s>".split()
TARGET = "Two young men play football in the park . </s>".split()
# ALIGN[i]: the source token that target token i attends to most in cross-attention
# layer 1, head 0 (the head the tests hover over after selecting it).
ALIGN = [0, 1, 2, 3, 6, 4, 4, 5, 7, 8]


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _heads(
    rng: np.random.Generator, tq: int, tk: int, peaks: list, causal: bool, strength: float = 4.0
) -> np.ndarray:
    """``(len(peaks), tq, tk)`` maps: head h puts most weight on key ``peaks[h][i]``."""
    maps = []
    for peak in peaks:
        logits = rng.normal(0.0, 0.5, (tq, tk))
        logits[np.arange(tq), peak] += strength
        if causal:
            logits[np.triu(np.ones((tq, tk), dtype=bool), 1)] = -np.inf
        maps.append(softmax(logits))
    return np.stack(maps)


def seq2seq_example() -> ExplorerExample:
    """A Transformer-like De->En example: 2 layers x 4 heads in three groups."""
    rng = np.random.default_rng(0)
    s, t = len(SOURCE), len(TARGET)
    si, ti = np.arange(s), np.arange(t)
    diag_t = np.minimum((ti * s) // t, s - 1)
    enc = [
        _heads(rng, s, s, [si, np.maximum(si - 1, 0), np.minimum(si + 1, s - 1), 0 * si], False)
        for _ in range(2)
    ]
    dec = [
        _heads(rng, t, t, [ti, np.maximum(ti - 1, 0), 0 * ti, np.maximum(ti - 2, 0)], True)
        for _ in range(2)
    ]
    shifted = [ALIGN[max(i - 1, 0)] for i in range(t)]
    cross = [
        _heads(rng, t, s, [diag_t, 0 * ti, np.full(t, s - 1), shifted], False),
        _heads(rng, t, s, [ALIGN, diag_t, shifted, np.full(t, s - 1)], False),
    ]
    return ExplorerExample(
        kind="seq2seq",
        source=SOURCE,
        target=TARGET,
        nbest=[
            Hypothesis("Two young men play football in the park .", -0.412),
            Hypothesis("Two young men are playing football in the park .", -0.538),
            Hypothesis("Two young guys play soccer in the park .", -0.861),
        ],
        groups=[
            AttentionGroup("encoder self-attention", enc),
            AttentionGroup("decoder self-attention", dec),
            AttentionGroup("cross-attention", cross),
        ],
        title="De\u2192En, synthetic",
    )


def causal_example(n_tokens: int = 512, layers: int = 8, heads: int = 2) -> ExplorerExample:
    """A decoder-only example over ``n_tokens`` tokens (prompt of 16 + continuation)."""
    rng = np.random.default_rng(1)
    words = [f"w{i}" for i in range(n_tokens)]
    ti = np.arange(n_tokens)
    peaks = [np.maximum(ti - 1 - h, 0) if h % 2 == 0 else 0 * ti for h in range(heads)]
    maps = [_heads(rng, n_tokens, n_tokens, peaks, True, 7.0) for _ in range(layers)]
    group = AttentionGroup("self-attention", [m.astype(np.float32) for m in maps])
    return ExplorerExample(
        kind="causal_lm",
        source=words[:16],
        target=words[16:],
        nbest=[Hypothesis(" ".join(words[16:24]) + " ...", -1.5)],
        groups=[group],
        title=f"{n_tokens} tokens",
    )
