"""T5's span-corruption objective (Raffel et al., 2020, §3.1.4): drop spans, predict them.

About ``noise_density`` (15%) of a sequence's tokens are chosen in spans of mean
length ``mean_span`` (3). The input keeps the other tokens and puts one
sentinel in place of each dropped span; the target lists each sentinel followed
by the span it stands for::

    original: Thank you for inviting me to your party last week .
    input:    Thank you <X> me to your party <Y> week .
    target:   <X> for inviting <Y> last

``noise_mask`` is the T5 code's ``random_spans_noise_mask``: the number of
noise tokens and of spans are fixed by the length, the span lengths (noise
and kept alike, each >= 1) are a random composition, kept and noise spans
alternate, and the sequence starts with kept tokens and ends with noise.
Sentinels are given by the caller (T5's ``<extra_id_0>``, ``<extra_id_1>``, ...),
used in order.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def _random_segmentation(items: int, segments: int, generator: torch.Generator) -> list[int]:
    """``items`` split into ``segments`` random lengths, each >= 1, summing to ``items``."""
    cuts = torch.randperm(items - 1, generator=generator)[: segments - 1].sort().values + 1
    edges = [0, *cuts.tolist(), items]
    return [b - a for a, b in zip(edges, edges[1:])]


def noise_counts(length: int, noise_density: float, mean_span: float) -> tuple[int, int]:
    """``(dropped tokens, spans)`` of a sequence of ``length >= 2`` tokens: both fixed by
    the length (the spans are how many sentinels a sequence needs)."""
    noise = min(max(round(length * noise_density), 1), length - 1)
    spans = max(round(noise / mean_span), 1)
    return noise, min(spans, noise, length - noise)  # each span needs >= 1 token of each kind


def noise_mask(
    length: int, generator: torch.Generator, noise_density: float = 0.15, mean_span: float = 3.0
) -> list[bool]:
    """Which of ``length`` tokens are dropped (True), in spans as in T5."""
    if length < 2:
        return [False] * length  # nothing to corrupt in a one-token sequence
    noise, spans = noise_counts(length, noise_density, mean_span)
    noise_lengths = _random_segmentation(noise, spans, generator)
    kept_lengths = _random_segmentation(length - noise, spans, generator)
    mask: list[bool] = []
    for kept, dropped in zip(kept_lengths, noise_lengths):
        mask += [False] * kept + [True] * dropped
    return mask


def span_corrupt(
    ids: Sequence[int],
    sentinels: Sequence[int],
    generator: torch.Generator,
    *,
    noise_density: float = 0.15,
    mean_span: float = 3.0,
) -> tuple[list[int], list[int]]:
    """``(input ids, target ids)`` of ``ids`` (no end-of-sequence added: the task adds it).

    Raises ``ValueError`` when the sequence needs more spans than ``sentinels``.
    """
    mask = noise_mask(len(ids), generator, noise_density, mean_span)
    source: list[int] = []
    target: list[int] = []
    span = -1
    for i, (token, dropped) in enumerate(zip(ids, mask)):
        if dropped:
            if i == 0 or not mask[i - 1]:  # a new span: one sentinel in both
                span += 1
                if span >= len(sentinels):
                    raise ValueError(
                        f"sentinels: {len(ids)} tokens need more than {len(sentinels)} spans"
                    )
                source.append(sentinels[span])
                target.append(sentinels[span])
            target.append(token)
        else:
            source.append(token)
    return source, target


def restore(source: Sequence[int], target: Sequence[int], sentinels: Sequence[int]) -> list[int]:
    """The original ids from ``span_corrupt``'s output (each sentinel replaced by its span)."""
    where = {s: i for i, s in enumerate(sentinels)}
    spans: dict[int, list[int]] = {}
    current: list[int] | None = None
    for token in target:
        if token in where:
            current = spans.setdefault(where[token], [])
        elif current is not None:
            current.append(token)
    out: list[int] = []
    for token in source:
        out += spans.get(where[token], []) if token in where else [token]
    return out
