"""Extractive question answering data: SQuAD-format JSON and JSONL, read and checked.

Files (``read_squad``):

* SQuAD JSON (``.json``, v1.1 and v2.0): ``{"data": [{"title", "paragraphs":
  [{"context", "qas": [{"id", "question", "answers": [{"text",
  "answer_start"}]}]}]}]}``. v2.0's unanswerable questions
  (``"is_impossible": true``, no answers) are kept, with no answers: the task
  trains them to point at ``[CLS]`` (BERT's no-answer convention).
* JSONL (``.jsonl``), one question per line, as Hugging Face's ``squad``
  dataset exports it: ``{"id", "question", "context", "answers": {"text":
  [...], "answer_start": [...]}}`` (empty lists: unanswerable).

A JSON file is one long line, so it is read whole (``read_document``) under a
ceiling of its own (``MAX_JSON_BYTES``, ``ATTNKIT_MAX_JSON_BYTES``), checked
before a byte is read; JSONL goes through the bounded line reader. Every
answer must occur in its context: ``answer_start`` is checked, and an answer
whose text sits elsewhere is moved to the nearest occurrence (the stored
offset was wrong). Every problem is one ``DataError`` naming the file and the
question id (JSON) or line (JSONL).

``read_questions`` reads unlabelled ``{"question", "context"}`` lines (``attnkit answer``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnkit.data.readers import check_readable, read_document, read_input_lines, read_lines
from attnkit.errors import DataError

JSON_ENV = "ATTNKIT_MAX_JSON_BYTES"
MAX_JSON_BYTES = 1 << 30  # SQuAD v1.1 train is 30 MB, v2.0 train 40 MB


@dataclass(frozen=True)
class QAExample:
    """One question on one context.

    Attributes:
        id: the question's id.
        question, context: the texts.
        answers: the gold answers' texts (SQuAD's dev set has several; none:
            unanswerable, SQuAD v2.0).
        starts: each answer's first character in ``context``.
        where: ``file: question 'id'`` or ``file:line``, for error messages.
    """

    id: str
    question: str
    context: str
    answers: tuple[str, ...]
    starts: tuple[int, ...]
    where: str

    @property
    def impossible(self) -> bool:
        return not self.answers


def max_json_bytes() -> int:
    """The largest SQuAD JSON file read (``ATTNKIT_MAX_JSON_BYTES``, default 1 GiB)."""
    raw = os.environ.get(JSON_ENV)
    if raw is None:
        return MAX_JSON_BYTES
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise DataError(f"{JSON_ENV}={raw!r}: expected a positive number of bytes")
    return value


def _string(value: object, where: str, field: str, *, blank: bool = False) -> str:
    if not isinstance(value, str):
        raise DataError(f"{where}: {field} must be a string, got {type(value).__name__}")
    if not blank and not value.strip():
        raise DataError(f"{where}: empty {field}")
    return value


def _answer(context: str, text: object, start: object, where: str) -> tuple[str, int]:
    """``(text, start)`` checked against ``context`` (a misplaced start is moved)."""
    text = _string(text, where, "answer text")
    if isinstance(start, bool) or not isinstance(start, int):
        raise DataError(f"{where}: answer_start must be an integer, got {start!r}")
    if context[start : start + len(text)] == text and start >= 0:
        return text, start
    found = _occurrences(context, text)
    if not found:
        raise DataError(f"{where}: answer {text[:40]!r} does not occur in the context")
    return text, min(found, key=lambda i: abs(i - start))


def _occurrences(context: str, text: str) -> list[int]:
    found, i = [], context.find(text)
    while i >= 0:
        found.append(i)
        i = context.find(text, i + 1)
    return found


def _example(
    qid: str, question: object, context: str, texts: list[object], starts: list[object], where: str
) -> QAExample:
    if len(texts) != len(starts):
        raise DataError(f"{where}: {len(texts)} answer texts but {len(starts)} answer_start values")
    answers = [_answer(context, t, s, where) for t, s in zip(texts, starts)]
    return QAExample(
        qid, _string(question, where, "question"), context,
        tuple(t for t, _ in answers), tuple(s for _, s in answers), where,
    )  # fmt: skip


def _list(value: object, where: str, field: str) -> list[Any]:
    if not isinstance(value, list):
        raise DataError(f"{where}: {field} must be a list, got {type(value).__name__}")
    return value


def _read_json(path: Path) -> list[QAExample]:
    size, limit = path.stat().st_size, max_json_bytes()
    if size > limit:
        raise DataError(f"{path}: {size} bytes is over the {limit}-byte ceiling for a SQuAD "
                        f"JSON file ({JSON_ENV} raises it)")  # fmt: skip
    try:
        document = json.loads(read_document(path))
    except json.JSONDecodeError as e:
        raise DataError(f"{path}:{e.lineno}: not valid JSON ({e.msg})") from None
    except RecursionError:
        raise DataError(f"{path}: JSON nested too deeply") from None
    if not isinstance(document, dict) or not isinstance(document.get("data"), list):
        raise DataError(f'{path}: expected SQuAD JSON, an object with a "data" list of articles')
    examples: list[QAExample] = []
    seen: set[str] = set()
    for a, article in enumerate(document["data"]):
        at = f"{path}: data[{a}]"
        if not isinstance(article, dict):
            raise DataError(f"{at}: an article must be an object with 'paragraphs'")
        for p, paragraph in enumerate(_list(article.get("paragraphs"), at, "paragraphs")):
            at_p = f"{at}.paragraphs[{p}]"
            if not isinstance(paragraph, dict):
                raise DataError(f"{at_p}: a paragraph must be an object with 'context' and 'qas'")
            context = _string(paragraph.get("context"), at_p, "context")
            for q, qa in enumerate(_list(paragraph.get("qas"), at_p, "qas")):
                if not isinstance(qa, dict):
                    raise DataError(f"{at_p}.qas[{q}]: a question must be an object")
                qid = qa.get("id", f"{a}-{p}-{q}")
                if not isinstance(qid, str | int) or isinstance(qid, bool):
                    raise DataError(f"{at_p}.qas[{q}]: id must be a string, got {qid!r}")
                qid = str(qid)
                where = f"{path}: question {qid!r}"
                if qid in seen:
                    raise DataError(f"{where}: the id occurs twice")
                seen.add(qid)
                answers = _list(qa.get("answers", []), where, "answers")
                if qa.get("is_impossible") is True:
                    answers = []  # v2.0: no answer (its plausible_answers are not gold)
                for answer in answers:
                    if not isinstance(answer, dict):
                        raise DataError(f"{where}: an answer must be an object with 'text' "
                                        "and 'answer_start'")  # fmt: skip
                texts = [x.get("text") for x in answers]
                starts = [x.get("answer_start") for x in answers]
                examples.append(_example(qid, qa.get("question"), context, texts, starts, where))
    return examples


def _read_jsonl(path: Path, *, labelled: bool) -> list[QAExample]:
    examples = []
    for number, line in enumerate(read_lines(path), 1):
        if line.strip():
            examples.append(parse_record(line, f"{path}:{number}", labelled=labelled))
    return examples


def parse_record(line: str, where: str, *, labelled: bool) -> QAExample:
    """One JSONL line: ``{"question", "context"}`` and, if ``labelled``, ``"answers"``."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as e:
        raise DataError(f"{where}: not valid JSON ({e.msg})") from None
    if not isinstance(record, dict):
        raise DataError(f"{where}: expected an object with 'question' and 'context'")
    for field in ("question", "context"):
        if field not in record:
            raise DataError(f"{where}: no {field!r} field")
    context = _string(record["context"], where, "context")
    qid = str(record.get("id", where.rsplit(":", 1)[-1]))
    if not labelled:
        return QAExample(qid, _string(record["question"], where, "question"), context, (), (),
                         where)  # fmt: skip
    answers = record.get("answers")
    if not isinstance(answers, dict) or not {"text", "answer_start"} <= set(answers):
        raise DataError(f"{where}: expected 'answers': {{'text': [...], 'answer_start': [...]}}")
    texts = _list(answers["text"], where, "answers.text")
    starts = _list(answers["answer_start"], where, "answers.answer_start")
    return _example(qid, record["question"], context, texts, starts, where)


def read_squad(path: str | Path) -> list[QAExample]:
    """The questions of a SQuAD JSON or JSONL file (module doc); at least one."""
    p = Path(path)
    check_readable(p)
    examples = _read_jsonl(p, labelled=True) if p.suffix == ".jsonl" else _read_json(p)
    if not examples:
        raise DataError(f"{p}: no questions")
    return examples


def read_questions(path: str | Path | None) -> list[QAExample]:
    """Unlabelled ``{"question", "context"}`` JSONL lines of ``path`` (``None``: stdin)."""
    name = str(path) if path is not None else "<stdin>"
    return [
        parse_record(line, f"{name}:{n}", labelled=False)
        for n, line in enumerate(read_input_lines(path), 1)
        if line.strip()
    ]
