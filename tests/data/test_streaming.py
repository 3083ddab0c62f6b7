"""Streaming corpora: weights respected, token budget kept, exact resume, max_len drops."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from attnkit.data import formats
from attnkit.data.formats import pair_inputs
from attnkit.data.streaming import PairStream
from attnkit.data.tokenizers import CharTokenizer
from attnkit.errors import DataError, UsageError

TOKENIZER = CharTokenizer.train(["abcdefghijklmnopqrstuvwxyz ABXY0123456789"])


def corpus(root: Path, name: str, prefix: str, n: int, shards: int = 1) -> list:
    folder = root / name
    folder.mkdir()
    for s in range(shards):
        lines = [f"{prefix}{i} " + "x" * (i % 13) for i in range(s, n, shards)]
        (folder / f"part{s}.src").write_text("".join(x + "\n" for x in lines))
        (folder / f"part{s}.tgt").write_text("".join(x.lower() + "\n" for x in lines))
    return pair_inputs(folder, [f"part{s}" for s in range(shards)], "src", "tgt")


def stream(corpora, weights, **kw) -> PairStream:
    options = {"max_len": 40, "skip_empty": False, "buffer": 64, "seed": 3, **kw}
    s = PairStream(corpora, weights, TOKENIZER, **options)
    s.set_max_tokens(200)
    return s


def first_letters(batches) -> list[str]:
    out = []
    for pairs, rows in batches:
        out += [TOKENIZER.decode(pairs.src[int(r)].tolist())[0] for r in rows]
    return out


def test_corpus_weights_set_each_corpus_share(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(formats, "CHUNK_LINES", 16)
    a = corpus(tmp_path, "a", "A", 50)  # small: read again and again
    b = corpus(tmp_path, "b", "B", 400, shards=3)
    letters = first_letters(itertools.islice(stream([a, b], [3.0, 1.0]), 300))
    share = letters.count("A") / len(letters)
    assert 0.72 < share < 0.78, share  # 3:1, over ~9,000 pairs
    letters = first_letters(itertools.islice(stream([a, b], [1.0, 1.0]), 300))
    assert 0.47 < letters.count("A") / len(letters) < 0.53
    # Deterministic for a seed, different for another.
    again = first_letters(itertools.islice(stream([a, b], [3.0, 1.0]), 40))
    assert again == first_letters(itertools.islice(stream([a, b], [3.0, 1.0]), 40))
    other = first_letters(itertools.islice(stream([a, b], [3.0, 1.0], seed=4), 40))
    assert other != again


def test_batches_keep_the_budget_and_drop_long_pairs(tmp_path) -> None:
    a = corpus(tmp_path, "a", "A", 120)
    s = stream([a], [1.0], max_len=12)
    for pairs, rows in itertools.islice(s, 40):
        costs = pairs.costs()[rows]
        assert int(costs.max()) * len(rows) <= 200 and int(costs.max()) <= 12
    assert s.corpora[0].dropped_long > 0
    with pytest.raises(DataError, match="no pair within data.max_len=3"):
        next(iter(stream([a], [1.0], max_len=3)))
    with pytest.raises(UsageError, match="data.max_len=400 allows pairs longer"):
        stream([a], [1.0], max_len=400)


def test_resume_from_a_state_gives_the_same_batches(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(formats, "CHUNK_LINES", 10)
    a = corpus(tmp_path, "a", "A", 90, shards=2)
    b = corpus(tmp_path, "b", "B", 70)

    def rows_of(batches) -> list[list[list[int]]]:
        return [[pairs.src[int(r)].tolist() for r in rows] for pairs, rows in batches]

    straight = stream([a, b], [2.0, 1.0])
    want = rows_of(itertools.islice(straight, 60))
    for cut in (1, 7, 23, 41):  # mid-window and on window edges, several passes in
        first = stream([a, b], [2.0, 1.0])
        got = rows_of(itertools.islice(first, cut))
        state = first.state_dict()
        resumed = stream([a, b], [2.0, 1.0])
        resumed.load_state_dict(state)
        got += rows_of(itertools.islice(resumed, 60 - cut))
        assert got == want, cut
    assert straight.state_dict()["corpora"][1]["pass"] >= 1  # corpus b was read again


def test_a_checkpoint_of_other_corpora_is_refused(tmp_path) -> None:
    a = corpus(tmp_path, "a", "A", 30)
    state = stream([a], [1.0]).state_dict()
    with pytest.raises(DataError, match="the checkpoint streamed 1 corpora"):
        stream([a, a], [1.0, 1.0]).load_state_dict(state)
    assert np.isclose(stream([a, a], [1.0, 3.0]).shares, [0.25, 0.75]).all()
