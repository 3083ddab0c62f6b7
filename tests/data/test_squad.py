"""SQuAD-format reading: v1.1 JSON, v2.0's unanswerable questions, JSONL, and the
one-line errors that name the file and the question id (JSON) or line (JSONL)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnkit.data.squad import read_questions, read_squad
from attnkit.errors import DataError

CONTEXT = "The tower was built in 1889 by Gustave Eiffel. In 1889 it opened."


def _squad(path: Path, qas: list[dict], context: str = CONTEXT) -> Path:
    data = {"version": "1.1", "data": [{"title": "T", "paragraphs": [{"context": context,
                                                                      "qas": qas}]}]}  # fmt: skip
    path.write_text(json.dumps(data))
    return path


def test_v1_json_keeps_every_gold_answer_and_checks_its_offset(tmp_path):
    path = _squad(tmp_path / "a.json", [
        {"id": "q1", "question": "When?", "answers": [{"text": "1889", "answer_start": 23},
                                                       {"text": "in 1889", "answer_start": 20}]},
        # a wrong offset moves to the nearest occurrence (the second "1889", at 50)
        {"id": "q2", "question": "When did it open?", "answers": [{"text": "1889",
                                                                   "answer_start": 48}]},
    ])  # fmt: skip
    first, second = read_squad(path)
    assert (first.id, first.answers, first.starts) == ("q1", ("1889", "in 1889"), (23, 20))
    assert CONTEXT[50:54] == "1889" and second.starts == (50,)
    assert not first.impossible


def test_v2_unanswerable_questions_have_no_answers(tmp_path):
    path = _squad(tmp_path / "v2.json", [
        {"id": "x", "question": "Who painted it?", "answers": [], "is_impossible": True,
         "plausible_answers": [{"text": "Gustave Eiffel", "answer_start": 31}]},
    ])  # fmt: skip
    (example,) = read_squad(path)
    assert example.impossible and example.answers == ()


def test_jsonl_in_hugging_face_layout(tmp_path):
    path = tmp_path / "q.jsonl"
    lines = [{"id": "a", "question": "Who?", "context": CONTEXT,
              "answers": {"text": ["Gustave Eiffel"], "answer_start": [31]}},
             {"id": "b", "question": "Who?", "context": CONTEXT,
              "answers": {"text": [], "answer_start": []}}]  # fmt: skip
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n\n")
    a, b = read_squad(path)
    assert a.answers == ("Gustave Eiffel",) and CONTEXT[31:45] == "Gustave Eiffel"
    assert b.impossible
    unlabelled = tmp_path / "u.jsonl"
    unlabelled.write_text(json.dumps({"question": "Who?", "context": CONTEXT}) + "\n")
    (question,) = read_questions(unlabelled)
    assert question.id == "1" and question.context == CONTEXT


@pytest.mark.parametrize(
    ("qas", "message"),
    [
        ([{"id": "q7", "question": "?", "answers": [{"text": "Paris", "answer_start": 0}]}],
         "question 'q7': answer 'Paris' does not occur in the context"),
        ([{"id": "q8", "question": " ", "answers": []}], "question 'q8': empty question"),
        ([{"id": "q9", "question": "?", "answers": [{"text": "1889", "answer_start": "23"}]}],
         "question 'q9': answer_start must be an integer"),
        ([{"id": "d", "question": "?", "answers": []}, {"id": "d", "question": "?", "answers": []}],
         "question 'd': the id occurs twice"),
    ],
)  # fmt: skip
def test_bad_questions_name_the_file_and_the_id(tmp_path, qas, message):
    path = _squad(tmp_path / "bad.json", qas)
    with pytest.raises(DataError) as e:
        read_squad(path)
    assert str(e.value) == f"{path}: {message}" or str(e.value).startswith(f"{path}: {message}")
    assert "\n" not in str(e.value)


def test_bad_files_are_one_line(tmp_path, monkeypatch):
    broken = tmp_path / "broken.json"
    broken.write_text('{"data": [\n{"title": }')
    with pytest.raises(DataError, match=r"broken.json:2: not valid JSON"):
        read_squad(broken)
    other = tmp_path / "other.json"
    other.write_text('{"rows": []}')
    with pytest.raises(DataError, match=r'expected SQuAD JSON, an object with a "data" list'):
        read_squad(other)
    line = tmp_path / "bad.jsonl"
    line.write_text(json.dumps({"question": "?", "context": "c", "answers": {}}) + "\n")
    with pytest.raises(DataError, match=r"bad.jsonl:1: expected 'answers'"):
        read_squad(line)
    monkeypatch.setenv("ATTNKIT_MAX_JSON_BYTES", "10")
    with pytest.raises(DataError, match=r"other.json: 12 bytes is over the 10-byte ceiling"):
        read_squad(other)
    with pytest.raises(DataError, match="file not found"):
        read_squad(tmp_path / "missing.json")


def test_the_shared_squad_files_read(shared_data):
    valid = read_squad(shared_data / "squad" / "valid.json")
    assert len(valid) == 4834 and all(len(x.answers) == 1 for x in valid)
    assert all(x.context[s : s + len(a)] == a for x in valid for a, s in zip(x.answers, x.starts))
