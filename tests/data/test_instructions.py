"""Instruction data: answer-only targets, chat-template turns, packing, line-numbered errors."""

from __future__ import annotations

import json

import pytest
from chat_helpers import chatml_tokenizer

from attnkit.data.instructions import (
    IGNORE_INDEX,
    Sequence,
    collate,
    pack,
    read_instructions,
)
from attnkit.errors import DataError

TWO_TURNS = {
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Capital of France?"},
        {"role": "assistant", "content": "Paris."},
        {"role": "user", "content": "Of Italy?"},
        {"role": "assistant", "content": "Rome."},
    ]
}


def _write(tmp_path, records) -> str:
    path = tmp_path / "train.jsonl"
    lines = [r if isinstance(r, str) else json.dumps(r) for r in records]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def _text(tokenizer, ids) -> str:
    return tokenizer.hf_tokenizer.decode(ids, skip_special_tokens=False)


def test_only_the_assistant_turns_are_scored(tmp_path):
    tok = chatml_tokenizer()
    data = read_instructions(_write(tmp_path, [TWO_TURNS]), tok, max_len=200)
    (seq,) = data.sequences
    scored = [i for i, s in zip(seq.ids, seq.scored) if s]
    assert _text(tok, scored) == "Paris.<|im_end|>\nRome.<|im_end|>\n"
    assert _text(tok, seq.ids) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nCapital of France?<|im_end|>\n"
        "<|im_start|>assistant\nParis.<|im_end|>\n<|im_start|>user\nOf Italy?<|im_end|>\n"
        "<|im_start|>assistant\nRome.<|im_end|>\n"
    )


def test_prompt_completion_scores_the_completion_and_eos(tmp_path):
    tok = chatml_tokenizer()
    record = {"prompt": "Capital of France?", "completion": " Paris."}
    (seq,) = read_instructions(_write(tmp_path, [record]), tok, max_len=200).sequences
    assert seq.ids[-1] == tok.eos_id
    assert _text(tok, [i for i, s in zip(seq.ids, seq.scored) if s]) == " Paris.<|im_end|>"
    assert _text(tok, [i for i, s in zip(seq.ids, seq.scored) if not s]) == "Capital of France?"


def test_collate_ignores_context_and_padding():
    long = Sequence([5, 6, 7, 8, 9], [False, False, True, True, False])
    short = Sequence([5, 7, 8], [False, True, True])
    inputs, targets = collate([long, short], pad_id=0)
    assert inputs.tolist() == [[5, 6, 7, 8], [5, 7, 0, 0]]
    x = IGNORE_INDEX
    assert targets.tolist() == [[x, 7, 8, x], [7, 8, x, x]]


def test_pack_scores_every_answer_token_once():
    seqs = [Sequence([1, 2, 3], [False, True, True]),
            Sequence([4, 5, 6, 7], [False, False, True, True])]  # fmt: skip
    pieces = pack(seqs, block=3)
    assert [p.ids for p in pieces] == [[1, 2, 3, 4], [4, 5, 6, 7]]
    targets = [t for p in pieces for t, s in zip(p.ids[1:], p.scored[1:]) if s]
    assert targets == [2, 3, 6, 7]


def test_long_examples_are_cut_and_answerless_ones_dropped(tmp_path):
    tok = chatml_tokenizer()
    records = [
        {"prompt": "What is the capital of France? " * 8, "completion": "Paris."},  # answer cut off
        {"prompt": "Capital?", "completion": "Paris. " * 20},  # cut, keeps answer tokens
        {"prompt": "Capital?", "completion": "Paris."},
    ]
    data = read_instructions(_write(tmp_path, records), tok, max_len=16)
    assert (data.truncated, data.dropped, len(data.sequences)) == (2, 1, 2)
    assert all(len(s.ids) <= 17 for s in data.sequences)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"prompt": "a", ', r"train.jsonl:2: not valid JSON \("),
        ("[1, 2]", r"train.jsonl:2: expected a JSON object, got list"),
        (
            '{"text": "a"}',
            r'train.jsonl:2: expected "messages" or "prompt" and "completion"; '
            r"the keys are text",
        ),  # fmt: skip
        ('{"prompt": "a"}', r'train.jsonl:2: "completion": expected a string, missing'),
        ('{"prompt": "a", "completion": ""}', r'train.jsonl:2: "completion": empty'),
        (
            '{"messages": [{"role": "user", "content": "a"}]}',
            r'train.jsonl:2: "messages": no assistant message',
        ),  # fmt: skip
        (
            '{"messages": [{"role": "user"}]}',
            r"train.jsonl:2: messages\[0\].content: expected a string, missing",
        ),  # fmt: skip
    ],
)
def test_malformed_records_name_file_and_line(tmp_path, line, message):
    path = _write(tmp_path, [{"prompt": "a", "completion": "b"}, line])
    with pytest.raises(DataError, match=message) as e:
        read_instructions(path, chatml_tokenizer(), max_len=64)
    assert "\n" not in str(e.value)


def test_messages_need_a_chat_template(tmp_path):
    path = _write(tmp_path, [TWO_TURNS])
    with pytest.raises(DataError, match=r"train.jsonl:1: this model's tokenizer has no chat"):
        read_instructions(path, chatml_tokenizer(template=None), max_len=64)
