"""Summarization data: {"text", "summary"} JSONL and TSV pairs, documents, instruction prompts."""

from __future__ import annotations

import json

import pytest
from chat_helpers import chatml_tokenizer

from attnkit.data.summaries import (
    instruction_record,
    prompt_text,
    read_documents,
    read_labelled_summaries,
)
from attnkit.data.tokenizers import CharTokenizer
from attnkit.errors import DataError


def test_jsonl_text_summary_pairs_ignore_other_keys(tmp_path):
    path = tmp_path / "train.jsonl"
    rows = [{"text": "Body one.\nLine two", "summary": "One", "id": "a", "annotations": ["x"]},
            {"src": "Body two", "tgt": "Two"}]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert read_labelled_summaries(path) == [("Body one.\nLine two", "One"), ("Body two", "Two")]


def test_tsv_pairs(tmp_path):
    path = tmp_path / "valid.tsv"
    path.write_text("a long body\tsubject\nanother body\tother\n", encoding="utf-8")
    assert read_labelled_summaries(path) == [("a long body", "subject"), ("another body", "other")]


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("a.jsonl", '{"text": "ok", "summary": "s"}\n{"text": "b"}\n',
         r'a\.jsonl:2: "summary" must be a string, got missing'),
        ("a.jsonl", '{"text": "ok", "summary": 3}\n', r'a\.jsonl:1: "summary" must be a string'),
        ("a.jsonl", '{"text": "ok", "summary": "s"}\n{"text": \n',
         r"a\.jsonl:2: not valid JSON"),
        ("a.jsonl", '["a"]\n', r'a\.jsonl:1: expected a JSON object with "src" and "tgt" '
         r'\(or "text" and "summary"\)'),
        ("a.jsonl", '{"text": "", "summary": "s"}\n', r"a\.jsonl:1: empty line"),
        ("a.tsv", "one\ttwo\tthree\n", r"a\.tsv:1: expected 2 tab-separated columns"),
        ("a.txt", "x\n", r"a\.txt: expected a \.jsonl file"),
    ],
)  # fmt: skip
def test_bad_files_are_one_line_errors_naming_file_and_line(tmp_path, name, text, message):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DataError, match=message) as e:
        read_labelled_summaries(path)
    assert "\n" not in str(e.value)


def test_documents_are_lines_or_jsonl_texts(tmp_path):
    lines = tmp_path / "docs.txt"
    lines.write_text("first doc\nsecond doc\n", encoding="utf-8")
    assert read_documents(lines) == ["first doc", "second doc"]
    jsonl = tmp_path / "docs.jsonl"
    jsonl.write_text('{"text": "multi\\nline", "summary": "ignored"}\n\n{"text": "b"}\n')
    assert read_documents(jsonl) == ["multi\nline", "b"]
    jsonl.write_text('{"body": "x"}\n')
    with pytest.raises(DataError, match=r'docs\.jsonl:1: "text" must be a string, got missing'):
        read_documents(jsonl)


def test_the_inference_prompt_is_the_training_records_context():
    tok = chatml_tokenizer()
    record = instruction_record(tok, "What is the capital of France?", "Paris.", text_tokens=100)
    user, answer = record["messages"]
    assert answer == {"role": "assistant", "content": "Paris."}
    prompt = prompt_text(tok, "What is the capital of France?", text_tokens=100)
    assert user["content"] in prompt and prompt.endswith("<|im_start|>assistant\n")
    # the text is cut to text_tokens, on both sides alike
    short = prompt_text(tok, "What is the capital of France?", text_tokens=3)
    assert tok.decode(tok.encode("What is the capital of France?")[:3]) in short
    assert "France" not in short


def test_without_a_chat_template_a_prompt_completion_record():
    tok = CharTokenizer.train(["abcdef summary"])
    record = instruction_record(tok, "abc def", "fed", text_tokens=5)
    assert record["completion"] == "fed"
    assert record["prompt"] == prompt_text(tok, "abc def", text_tokens=5)
    assert "abc d\n" in record["prompt"]
