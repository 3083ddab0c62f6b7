"""Extractive QA through the CLI on a tiny model: train (task: question_answering),
evaluate --labelled (SQuAD EM/F1, as the run's validation), answer (one question, JSONL in
and out), and the one-line errors."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from qa_helpers import squad_file

from attnkit.cli.main import main

pytestmark = pytest.mark.slow  # a tiny model trained for 120 steps (~10 s on 2 cores)

CONFIG = """
task: question_answering
data: {{dir: {dir}, train: train.json, valid: valid.json, max_len: 64, doc_stride: 15}}
tokenizer: {{kind: char}}
model: {{d_model: 32, num_heads: 2, d_ff: 64, num_layers: 2, max_len: 64, dropout: 0.0}}
train: {{max_steps: 120, batch_size: 16, schedule: constant, lr: 3.0e-3, warmup_steps: 0,
        log_every: 40, eval_every: 120, save_every: 0, cpu_matmul: mkl}}
"""


@pytest.fixture(scope="module")
def reader(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("qa")
    squad_file(root / "train.json", 250, 0)
    squad_file(root / "valid.json", 20, 1, prefix="v")
    (root / "c.yaml").write_text(CONFIG.format(dir=root))
    out = root / "run"
    code = main(["train", "--config", str(root / "c.yaml"), "--out", str(out), "--no-progress"])
    assert code == 0
    return out


def test_evaluate_labelled_gives_the_runs_squad_scores(reader, capsys):
    valid = reader.parent / "valid.json"
    assert main(["evaluate", "--checkpoint", str(reader), "--labelled", str(valid), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["questions"] == 40 and 0 <= result["exact_match"] <= result["f1"] <= 100
    metrics = json.loads((reader / "metrics.jsonl").read_text().splitlines()[-1])
    # the same windows (64 tokens; the default stride for 64 is the run's 15): the same scores
    assert result["exact_match"] == pytest.approx(metrics["exact_match"])
    assert result["f1"] == pytest.approx(metrics["f1"])
    assert result["f1"] > 20  # well above chance: it learned where colours are
    assert main(["evaluate", "--checkpoint", str(reader), "--labelled", str(valid)]) == 0
    assert capsys.readouterr().out.startswith(f"exact match {result['exact_match']:.2f}   F1")


def test_answer_one_question_and_jsonl(reader, monkeypatch, capsys):
    context = "the cow is pink. the owl is gold. the pig is red."
    argv = ["answer", "--checkpoint", str(reader), "--question", "what colour is the owl?",
            "--context", context]  # fmt: skip
    assert main([*argv, "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert set(record) == {"answer", "score", "start", "end"}
    assert context[record["start"] : record["end"]] == record["answer"] != ""
    assert 0 < record["score"] <= 1
    assert main(argv) == 0
    assert capsys.readouterr().out == record["answer"] + "\n"
    lines = [{"id": "a", "question": "what colour is the pig?", "context": context},
             {"question": "what colour is the cow?", "context": context * 3}]  # fmt: skip
    monkeypatch.setattr("sys.stdin", io.StringIO("\n".join(json.dumps(x) for x in lines)))
    assert main(["answer", "--checkpoint", str(reader), "--json"]) == 0
    out = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [x["id"] for x in out] == ["a", "2"]  # without an id: the line number
    assert all(lines[i]["context"][x["start"] : x["end"]] == x["answer"] for i, x in enumerate(out))


def test_bad_input_is_one_line(reader, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO('{"question": "x?"}\n'))
    assert main(["answer", "--checkpoint", str(reader)]) == 1
    assert capsys.readouterr().err.strip() == "attnkit answer: error: <stdin>:1: no 'context' field"
    assert main(["answer", "--checkpoint", str(reader), "--question", "x?"]) == 2
    assert "--question and --context go together" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    qa = {"id": "z", "question": "?", "answers": [{"text": "q", "answer_start": 0}]}
    bad.write_text(json.dumps({"data": [{"paragraphs": [{"context": "abc", "qas": [qa]}]}]}))
    assert main(["evaluate", "--checkpoint", str(reader), "--labelled", str(bad)]) == 1
    err = capsys.readouterr().err
    assert f"{bad}: question 'z': answer 'q' does not occur in the context" in err
    assert len(err.strip().splitlines()) == 1
    monkeypatch.setattr("sys.stdin", io.StringIO("the cow\n"))
    assert main(["classify", "--checkpoint", str(reader)]) == 2
    assert "labels tokens, not texts (label_level: token)" in capsys.readouterr().err


def test_attention_and_explore_read_a_qa_checkpoint(reader, tmp_path, capsys):
    png, page = tmp_path / "a.png", tmp_path / "e.html"
    text = "what colour is the cow?\tthe cow is pink."
    assert main(["attention", "--checkpoint", str(reader), "--text", text,
                 "--out", str(png)]) == 0  # fmt: skip
    assert png.stat().st_size > 1000
    assert main(["explore", "--checkpoint", str(reader), "--text", text,
                 "--out", str(page)]) == 0  # fmt: skip
    assert "attnkit.explorer" in page.read_text()
