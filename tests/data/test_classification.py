"""Labelled texts (attnkit.data.classification): TSV/JSONL formats, label maps, line-numbered
errors, BERT-style encoding and length-grouped batches."""

from __future__ import annotations

import json

import pytest
import torch

from attnkit.data.classification import (
    collate_examples,
    encode_example,
    label_names,
    length_grouped_order,
    read_labelled,
    split_input_line,
)
from attnkit.errors import DataError


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_tsv_without_header_single_and_pairs(tmp_path):
    single = read_labelled(_write(tmp_path, "a.tsv", "pos\tgood film\n\nneg\tbad film\n"))
    assert single.texts == ["good film", "bad film"] and single.pairs is None
    assert single.labels == ["pos", "neg"] and single.lines == [1, 3]  # the blank line skipped
    pairs = read_labelled(_write(tmp_path, "b.tsv", "1\ta man sleeps\ta person rests\n"))
    assert pairs.texts == ["a man sleeps"] and pairs.pairs == ["a person rests"]


@pytest.mark.parametrize(
    "header", ["sentence\tlabel", "label\tsentence", "Label\tText", "text\tlabel"]
)
def test_a_header_says_where_the_columns_are(tmp_path, header):
    rows = ["it 's great .", "1"] if header.lower().startswith(("sentence", "text")) else None
    line = "\t".join(rows) if rows else "1\tit 's great ."
    data = read_labelled(_write(tmp_path, "h.tsv", f"{header}\n{line}\n"))
    assert data.texts == ["it 's great ."] and data.labels == ["1"] and data.lines == [2]


def test_pair_headers(tmp_path):
    text = "sentence1\tsentence2\tlabel\nthe cat\ta cat\tentailment\n"
    data = read_labelled(_write(tmp_path, "p.tsv", text))
    assert (data.texts, data.pairs, data.labels) == (["the cat"], ["a cat"], ["entailment"])


def test_jsonl_labels_strings_or_ints(tmp_path):
    lines = [{"label": 1, "text": "fine"}, {"label": "1", "sentence": "also fine"},
             {"label": "neg", "text": "bad"}]  # fmt: skip
    data = read_labelled(_write(tmp_path, "d.jsonl", "\n".join(map(json.dumps, lines))))
    assert data.labels == ["1", "1", "neg"] and data.texts[1] == "also fine"
    pairs = read_labelled(_write(tmp_path, "p.jsonl", json.dumps(
        {"label": 0, "text_a": "x", "text_b": "y"})))  # fmt: skip
    assert pairs.pairs == ["y"]


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("a.tsv", "1\tok\n1\tok\textra\tfield\n", r"a.tsv:2: expected label<TAB>text, got 4"),
        ("a.tsv", "1\tok\n0\t  \n", r"a.tsv:2: empty text"),
        ("a.tsv", "1\tok\n\t  text\n", r"a.tsv:2: empty label"),
        ("a.tsv", "just one field\n", r"a.tsv:1: expected label<TAB>text or"),
        ("a.tsv", "sentence\tlabel\nfine\t1\nbroken\n", r"a.tsv:3: expected the header's 2"),
        ("a.jsonl", '{"label": 1, "text": "a"}\n{"label": 1, "text": \n', r"a.jsonl:2: not valid"),
        ("a.jsonl", '{"label": true, "text": "a"}\n', r"a.jsonl:1: label must be a string or"),
        ("a.jsonl", '{"text": "a"}\n', r"a.jsonl:1: expected an object with 'label'"),
        ("a.jsonl", '{"label": 1, "words": "a"}\n', r"a.jsonl:1: no text"),
        ("a.jsonl", '{"label": 1, "text": 5}\n', r"a.jsonl:1: text must be a string"),
        ("a.jsonl", '{"label": 1, "text_a": "a", "text_b": "b"}\n{"label": 1, "text": "c"}\n',
         r"a.jsonl:2: mixes single sentences and sentence pairs"),
        ("a.tsv", "\n\n", r"a.tsv: file is empty"),
        # a header alone: evaluate --labelled once died in argmax (IndexError)
        ("a.tsv", "label\ttext\n\n", r"a.tsv: only a header line, no examples"),
    ],
)  # fmt: skip
def test_malformed_records_are_one_line_errors_naming_file_and_line(tmp_path, name, text, message):
    with pytest.raises(DataError, match=message) as info:
        read_labelled(_write(tmp_path, name, text))
    assert "\n" not in str(info.value)


def test_label_order_is_numeric_for_integers_and_unknown_labels_name_the_line(tmp_path):
    assert label_names(["10", "2", "2", "-1"]) == ("-1", "2", "10")
    assert label_names(["pos", "neg", "neutral"]) == ("neg", "neutral", "pos")
    data = read_labelled(_write(tmp_path, "v.tsv", "pos\tx\nmaybe\ty\n"))
    assert data.label_ids(["neg", "pos", "maybe"]) == [1, 2]
    with pytest.raises(DataError, match=r"v.tsv:2: label 'maybe' is not one of the model's"):
        data.label_ids(["neg", "pos"])


def test_encoding_is_bert_style_and_cuts_the_longer_sentence_first():
    ids, types, cut = encode_example([5, 6], [7], bos_id=1, eos_id=2, max_len=10)
    assert (ids, types, cut) == ([1, 5, 6, 2, 7, 2], [0, 0, 0, 0, 1, 1], False)
    ids, types, cut = encode_example(list(range(10, 20)), [7, 8], bos_id=1, eos_id=2, max_len=9)
    assert cut and len(ids) == 9 and ids[-3:] == [7, 8, 2]  # a lost tokens, b kept
    ids, _, cut = encode_example(list(range(10, 20)), None, bos_id=1, eos_id=2, max_len=5)
    assert (ids, cut) == ([1, 10, 11, 12, 2], True)


def test_collate_pads_ids_and_types():
    batch = collate_examples([[1, 5, 2], [1, 2]], [[0, 0, 0], [0, 0]], [1, 0], pad_id=0)
    assert batch.ids.tolist() == [[1, 5, 2], [1, 2, 0]]
    assert batch.token_types.tolist() == [[0, 0, 0], [0, 0, 0]]
    assert batch.labels.tolist() == [1, 0]


@pytest.mark.parametrize("group", [True, False])
def test_an_epoch_visits_every_example_once_and_grouping_cuts_padding(group):
    lengths = torch.randint(3, 60, (1000,), generator=torch.Generator().manual_seed(0)).tolist()
    batches = length_grouped_order(lengths, 16, torch.Generator().manual_seed(1), group=group)
    assert sorted(i for b in batches for i in b) == list(range(1000))
    assert all(len(b) == 16 for b in batches[:-1] if not group) and len(batches) == 63
    padded = sum(len(b) * max(lengths[i] for i in b) for b in batches)
    if group:  # sorted windows: padding is a few percent of the real tokens
        assert padded < 1.1 * sum(lengths)
    else:
        assert padded > 1.5 * sum(lengths)


def test_split_input_line():
    assert split_input_line("one text", "x:1") == ("one text", None)
    assert split_input_line("a\tb", "x:1") == ("a", "b")
    with pytest.raises(DataError, match="x:3: expected text or text_a<TAB>text_b"):
        split_input_line("a\tb\tc", "x:3")


def test_the_real_sst2_files_read(shared_data):
    train = read_labelled(shared_data / "sst2" / "train.tsv")
    dev = read_labelled(shared_data / "sst2" / "dev.tsv")
    assert (len(train), len(dev)) == (67349, 872)
    assert label_names(train.labels) == ("0", "1") and train.pairs is None


@pytest.mark.parametrize(
    ("label", "shown"),
    [("pos\tneg", r"'\\t' \(U\+0009\)"), ("pos\nneg", r"'\\n' \(U\+000A\)"),
     ("a\u2028b", r"'\\u2028' \(U\+2028\)"), ("x\x85y", r"'\\x85' \(U\+0085\)")],
)  # fmt: skip
def test_a_label_holding_a_tab_or_line_break_is_refused_naming_the_line(tmp_path, label, shown):
    """`classify` prints one label<TAB>probability line per input; such a label broke it."""
    text = (
        json.dumps({"label": "ok", "text": "a"}) + "\n" + json.dumps({"label": label, "text": "b"})
    )
    with pytest.raises(
        DataError, match=rf"b.jsonl:2: label .* holds the control character {shown}"
    ):
        read_labelled(_write(tmp_path, "b.jsonl", text + "\n"))
