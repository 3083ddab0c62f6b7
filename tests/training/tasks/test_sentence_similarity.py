"""``task: sentence_similarity``: cosine regression on scored pairs and in-batch negatives on
pairs without scores, from scratch on a tiny encoder; validation correlations; the
checkpoint read by ``attnkit embed`` and ``attnkit evaluate --labelled``."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from attnkit.cli.main import main

WORDS = ["red", "blue", "green", "cat", "dog", "bird", "runs", "sleeps", "eats", "big"]
CONFIG = """
task: sentence_similarity
data: {{dir: {dir}, train: {train}, valid: {valid}, max_len: 32}}
tokenizer: {{kind: char}}
model: {{d_model: 16, num_heads: 2, d_ff: 32, num_layers: 1, max_len: 32}}
train: {{max_steps: 6, batch_size: 4, lr: 1.0e-3, schedule: constant, warmup_steps: 0,
        log_every: 1, eval_every: 3, save_every: 3, keep_last: 1}}
"""


def _sentence(i: int) -> str:
    return " ".join(WORDS[(i * k) % len(WORDS)] for k in (1, 3, 7))


def _write(tmp_path, scored: bool):
    lines = []
    for i in range(24):
        a, b = _sentence(i), _sentence(i + (0 if i % 2 else 5))
        lines.append(f"{i % 6}\t{a}\t{b}" if scored else f"{a}\t{b}")
    (tmp_path / "train.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (tmp_path / "valid.tsv").write_text("\n".join(lines[:8]) + "\n", encoding="utf-8")
    config = tmp_path / "run.yaml"
    config.write_text(CONFIG.format(dir=tmp_path, train="train.tsv", valid="valid.tsv"))
    return config


@pytest.mark.parametrize("scored", [True, False])
def test_trains_and_reports_its_metrics(tmp_path, capsys, scored):
    config = _write(tmp_path, scored)
    out = tmp_path / "run"
    assert main(["train", "--config", str(config), "--out", str(out), "--no-progress"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    valid = summary["valid"]
    if scored:
        assert set(valid) == {"pearson", "spearman", "loss"}
        assert -1 <= valid["spearman"] <= 1
    else:
        assert set(valid) == {"loss"}
    records = [json.loads(r) for r in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r.get("split") == "train"][-1] == 6
    if scored:  # the checkpoint embeds, and scores a labelled file
        assert main(["evaluate", "--checkpoint", str(out), "--labelled",
                     str(tmp_path / "valid.tsv"), "--json"]) == 0  # fmt: skip
        result = json.loads(capsys.readouterr().out)
        assert result["pairs"] == 8 and result["spearman"] == pytest.approx(valid["spearman"])
        argv = [sys.executable, "-m", "attnkit", "embed", "--checkpoint", str(out)]
        done = subprocess.run(argv, input="red cat\n", capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert len(json.loads(done.stdout)["embedding"]) == 16


def test_one_pair_batches_without_scores_are_refused(tmp_path):
    config = _write(tmp_path, scored=False)
    done = subprocess.run(
        [sys.executable, "-m", "attnkit", "train", "--config", str(config), "--out",
         str(tmp_path / "r"), "--set", "train.batch_size=1"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2 and "train.batch_size" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_cosent_matches_sentence_transformers():
    """``cosent_loss`` is sentence-transformers' ``CoSENTLoss`` on the same cosines (ties in
    the gold scores included), and its gradient ranks: the pair scored lower is pushed down."""
    import torch
    from sentence_transformers.sentence_transformer.losses import CoSENTLoss

    from attnkit.training.tasks.sentence_similarity import cosent_loss

    torch.manual_seed(0)
    u, v = torch.randn(12, 8), torch.randn(12, 8)
    gold = torch.tensor([0.0, 0.2, 0.2, 1.0, 0.4, 0.8, 0.8, 0.8, 0.1, 0.6, 0.3, 0.9])
    reference = CoSENTLoss(torch.nn.Identity()).compute_loss_from_embeddings([u, v], gold)
    cosine = torch.nn.functional.cosine_similarity(u, v, dim=-1).requires_grad_()
    ours = cosent_loss(cosine, gold)
    assert ours.item() == pytest.approx(reference.item(), rel=1e-5)
    ours.backward()
    lowest, highest = int(gold.argmin()), int(gold.argmax())
    assert (
        cosine.grad[lowest] > 0 > cosine.grad[highest]
    )  # descent lowers the first, raises the last


def test_cosent_trains(tmp_path, capsys):
    config = _write(tmp_path, scored=True)
    config.write_text(
        config.read_text().replace("keep_last: 1}", "keep_last: 1, similarity_loss: cosent}")
    )
    out = tmp_path / "run"
    assert main(["train", "--config", str(config), "--out", str(out), "--no-progress"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["valid"]["loss"] > 0 and -1 <= summary["valid"]["spearman"] <= 1
