"""Sentence pairs with a similarity score (STS Benchmark and the like), or without one.

Two formats, chosen by the file's suffix:

* TSV (``.tsv``, ``.txt``): ``score<TAB>sentence1<TAB>sentence2`` per line, or
  ``sentence1<TAB>sentence2`` for pairs without a score (paraphrases, question and
  answer: trained with in-batch negatives); a first line whose first field is not a
  number is a header (``score<TAB>sentence1<TAB>sentence2``) and skipped;
* JSONL (``.jsonl``, ``.json``): ``{"sentence1": .., "sentence2": .., "score": ..}``
  per line (``score`` optional, the same for every line).

Every line of a file has a score or none does. Errors are ``DataError`` naming the
file and line. Lines are read through the bounded readers (``attnkit.data.readers``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from attnkit.data.readers import read_lines
from attnkit.errors import DataError

JSON_SUFFIXES = (".jsonl", ".json")


@dataclass(frozen=True)
class ScoredPairs:
    """``first[i]`` and ``second[i]`` with ``scores[i]`` (``None``: pairs without scores)."""

    first: list[str]
    second: list[str]
    scores: list[float] | None
    source: str

    def __len__(self) -> int:
        return len(self.first)


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _read_tsv(path: Path) -> tuple[list[str], list[str], list[float | None]]:
    first, second, scores = [], [], []
    for n, line in enumerate(read_lines(path), 1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) == 3:
            score = _number(fields[0])
            if score is None:
                if n == 1:  # a header
                    continue
                raise DataError(f"{path}:{n}: score {fields[0]!r} is not a finite number")
            a, b = fields[1], fields[2]
        elif len(fields) == 2:
            score, (a, b) = None, fields
        else:
            raise DataError(f"{path}:{n}: expected score<TAB>sentence1<TAB>sentence2 or "
                            f"sentence1<TAB>sentence2, got {len(fields)} fields")  # fmt: skip
        if not a.strip() or not b.strip():
            raise DataError(f"{path}:{n}: empty sentence")
        first.append(a)
        second.append(b)
        scores.append(score)
    return first, second, scores


def _read_jsonl(path: Path) -> tuple[list[str], list[str], list[float | None]]:
    first, second, scores = [], [], []
    for n, line in enumerate(read_lines(path), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"{path}:{n}: not valid JSON ({e.msg})") from None
        if not isinstance(record, dict):
            raise DataError(f"{path}:{n}: expected a JSON object")
        a, b = record.get("sentence1"), record.get("sentence2")
        if not isinstance(a, str) or not isinstance(b, str) or not a.strip() or not b.strip():
            raise DataError(f"{path}:{n}: expected non-empty strings sentence1 and sentence2")
        raw = record.get("score")
        score = None
        if raw is not None:
            if isinstance(raw, bool) or not isinstance(raw, int | float):
                raise DataError(f"{path}:{n}: score: expected a number, got {raw!r}")
            score = float(raw)
            if not math.isfinite(score):
                raise DataError(f"{path}:{n}: score: not a finite number")
        first.append(a)
        second.append(b)
        scores.append(score)
    return first, second, scores


def read_scored_pairs(path: str | Path) -> ScoredPairs:
    """The pairs of a TSV or JSONL file (see the module doc)."""
    p = Path(path)
    reader = _read_jsonl if p.suffix.lower() in JSON_SUFFIXES else _read_tsv
    first, second, scores = reader(p)
    if not first:
        raise DataError(f"{p}: no sentence pairs")
    given = [s is not None for s in scores]
    if any(given) and not all(given):
        n = given.index(not given[0]) + 1
        raise DataError(f"{p}: pair {n} {'has' if given[n - 1] else 'lacks'} a score, the "
                        "first does not; give every pair a score or none")  # fmt: skip
    values = [float(s) for s in scores if s is not None] if all(given) else None
    return ScoredPairs(first, second, values, str(p))
