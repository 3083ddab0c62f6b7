"""task: mlm with train.nsp: the NSP head reads [CLS], the objective is MLM + weight x NSP and
both parts are logged, a tiny encoder learns to tell next sentences apart, batches resume
exactly, and keys that do not apply are refused by name."""

from __future__ import annotations

import dataclasses
import json
import random

import pytest
import torch
import torch.nn.functional as F

from attnkit.errors import ConfigError
from attnkit.training.distributed import DistContext
from attnkit.training.loop import Trainer
from attnkit.training.runconfig import RunConfig, load_run_config
from attnkit.training.tasks import NextSentenceTask, TaskContext, task_from_run

TINY = {"d_model": 32, "num_heads": 2, "d_ff": 64, "num_layers": 2, "max_len": 24,
        "dropout": 0.0}  # fmt: skip
TOPICS = ["abc", "def", "ghi", "jkl"]


def _corpus(docs: int, seed: int = 0) -> str:
    """Blank-line separated documents of 5 sentences; document d writes only the letters of
    topic d % 4, so a next sentence shares its first sentence's letters and a random one
    (from another document) mostly does not."""
    rng = random.Random(seed)
    return "\n\n".join(
        "\n".join("".join(rng.choices(TOPICS[d % 4], k=8)) for _ in range(5)) for d in range(docs)
    )


def _run(tmp_path, model=None, task="mlm", data=None, **train) -> RunConfig:
    (tmp_path / "input.txt").write_text(_corpus(40), encoding="utf-8")
    train = {"nsp": True, "max_steps": 4, "max_tokens": 32 * 24, "schedule": "constant",
             "lr": 3e-3, "warmup_steps": 0, "log_every": 1, "eval_every": 1000,
             "save_every": 0, "eval_blocks": 64, **train}  # fmt: skip
    return RunConfig.from_dict({
        "task": task,
        "data": {"dir": str(tmp_path), "text": "input.txt", "loading": "memory",
                 "valid_fraction": 0.2, **(data or {})},
        "tokenizer": {"kind": "char"},
        "model": {**TINY, **(model or {})},
        "train": train,
    })  # fmt: skip


def _records(trainer: Trainer, split: str) -> list[dict]:
    lines = (trainer.out_dir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["split"] == split]


def test_mlm_with_nsp_builds_the_pair_task_with_segments_and_a_two_label_head(tmp_path):
    task = task_from_run(_run(tmp_path))
    assert isinstance(task, NextSentenceTask)
    c = task.model_config
    assert (c.type_vocab_size, c.num_labels, c.pooling) == (2, 2, "first")
    assert c.label_names == ("is_next", "not_next")
    assert len(task.train.sentences) == 32 * 5 and len(task.valid.sentences) == 8 * 5
    assert "MLM + 1 x NSP" in task.describe()


def test_the_nsp_head_reads_the_cls_position(tmp_path):
    task = task_from_run(_run(tmp_path))
    torch.manual_seed(0)
    model = task.build_model().eval()
    (inputs, types, _, _), _ = task.next_batch()
    assert bool((inputs[:, 0] == task.model_config.bos_id).all())  # [CLS] first
    out = model(inputs, token_types=types)
    torch.testing.assert_close(out.class_logits, model.classifier(out.hidden[:, 0]))
    # the segments reach the encoder: B read as segment 0 changes what [CLS] sees
    with torch.no_grad():
        model.token_types.weight.normal_()
    again = model(inputs, token_types=types)
    flat = model(inputs, token_types=torch.zeros_like(types))
    assert not torch.allclose(again.class_logits, flat.class_logits)


def test_the_objective_is_mlm_plus_weighted_nsp_and_both_parts_are_logged(tmp_path):
    trainer = Trainer(_run(tmp_path, nsp_weight=0.5, eval_every=4),
                      task_from_run(_run(tmp_path, nsp_weight=0.5, eval_every=4)),
                      tmp_path / "run", progress=False)  # fmt: skip
    trainer.fit()
    train = _records(trainer, "train")
    assert [r["step"] for r in train] == [1, 2, 3, 4]
    for r in train:
        assert r["loss"] == pytest.approx(r["mlm_loss"] + 0.5 * r["nsp_loss"], rel=1e-6)
        assert r["nll"] == pytest.approx(r["mlm_loss"], rel=1e-6)
        assert 0.0 <= r["nsp_accuracy"] <= 1.0
    (valid,) = _records(trainer, "valid")
    assert set(valid) >= {"loss", "mlm_loss", "ppl", "nsp_loss", "nsp_accuracy"}
    assert valid["loss"] == pytest.approx(valid["mlm_loss"] + 0.5 * valid["nsp_loss"])
    assert valid["nsp_accuracy"] * 64 == pytest.approx(round(valid["nsp_accuracy"] * 64))


def test_the_loss_matches_its_parts_recomputed_by_hand(tmp_path):
    task = task_from_run(_run(tmp_path, nsp_weight=2.0))
    torch.manual_seed(0)
    model = task.build_model()
    batch, _ = task.next_batch()
    sums = task.loss(model, batch)
    inputs, types, mlm_labels, nsp_labels = batch
    out = model(inputs, token_types=types)
    selected = mlm_labels != -100
    mlm = F.cross_entropy(out.mlm_logits[selected], mlm_labels[selected], reduction="sum")
    nsp = F.cross_entropy(out.class_logits, nsp_labels)
    n = int(selected.sum())
    assert sums.tokens == n and n > 0
    torch.testing.assert_close(sums.loss / n, mlm / n + 2.0 * nsp)
    assert sums.metrics["nsp_loss"] == pytest.approx(float(nsp.detach()), rel=1e-5)
    assert bool((nsp_labels == 1).sum() == nsp_labels.numel() // 2)


def test_a_tiny_encoder_learns_next_sentence_prediction(tmp_path):
    run = _run(tmp_path, max_steps=150, lr=3e-3, eval_every=150)
    trainer = Trainer(run, task_from_run(run), tmp_path / "run", progress=False)
    before = trainer.evaluate()
    summary = trainer.fit()
    assert 0.3 < before["nsp_accuracy"] < 0.7
    assert summary["valid"]["nsp_accuracy"] >= 0.8, summary["valid"]
    assert summary["valid"]["mlm_loss"] < before["mlm_loss"]


def test_batches_resume_exactly(tmp_path):
    task = task_from_run(_run(tmp_path))
    task.next_batch()
    state = {k: v.clone() for k, v in task.state_dict().items()}
    first, _ = task.next_batch()
    fresh = task_from_run(_run(tmp_path))
    fresh.load_state_dict(state)
    again, _ = fresh.next_batch()
    for x, y in zip(first, again):
        assert torch.equal(x, y)


def test_nsp_keys_apply_to_mlm_only_and_are_checked(tmp_path):
    with pytest.raises(ConfigError, match=r"train\.nsp: applies to task mlm, not lm"):
        _run(tmp_path, task="lm")
    with pytest.raises(ConfigError, match=r"train\.nsp_weight: applies to task mlm, not lm"):
        RunConfig.from_dict({"task": "lm", "train": {"nsp_weight": 0.5}})
    with pytest.raises(ConfigError, match="nsp_weight: must be >= 0"):
        _run(tmp_path, nsp_weight=-1.0)
    with pytest.raises(ConfigError, match=r"data.block_size: 999 tokens per pair, the model has"):
        task_from_run(_run(tmp_path, data={"block_size": 999}))
    with pytest.raises(ConfigError, match=r"data.block_size: 4 positions leave no room"):
        task_from_run(_run(tmp_path, data={"block_size": 4}))
    with pytest.raises(ConfigError, match="model.type_vocab_size"):
        task_from_run(_run(tmp_path, model={"type_vocab_size": 0}))
    with pytest.raises(ConfigError, match="model.pooling: train.nsp's head reads"):
        task_from_run(_run(tmp_path, model={"pooling": "mean"}))


def test_data_block_size_cuts_pairs_below_the_models_positions(tmp_path):
    """BERT's 128-token phase on a model with more positions: pairs and batches follow
    data.block_size; the model keeps its positions."""
    whole = task_from_run(_run(tmp_path))
    short = task_from_run(_run(tmp_path, data={"block_size": 12}))
    assert short.model_config.max_len == whole.model_config.max_len > 12
    assert short.batch_size == (32 * 24) // 12 > whole.batch_size
    inputs, types, _, _ = short.make_batch(
        short.train,
        short.batch_size,
        torch.Generator().manual_seed(0),
        torch.Generator().manual_seed(1),
    )
    assert inputs.shape[0] == short.batch_size and inputs.shape[1] <= 12
    assert types.shape == inputs.shape
    assert inputs.shape[1] == 12  # the pairs fill their 12 tokens (documents of 40 characters)
    assert "pairs of up to 12 tokens" in short.describe()


def test_data_documents_file_makes_the_text_one_document(tmp_path):
    """Blank lines part documents by default; with documents: file a NotNext B may come from
    anywhere but after A, and an IsNext pair may cross a blank line."""
    default = task_from_run(_run(tmp_path))
    whole = task_from_run(_run(tmp_path, data={"documents": "file"}))
    assert not default.train.single_document and whole.train.single_document
    assert len(whole.train.sentences) == len(default.train.sentences)
    assert len(whole.train.firsts) == len(whole.train.sentences) - 1
    pairs = whole.train.sample(64, torch.Generator().manual_seed(0), bos_id=1, eos_id=2, max_len=24)
    for label, a, b in zip(pairs.labels, pairs.a, pairs.b, strict=True):
        assert (b.start == a.stop) == (label == 0)
    with pytest.raises(ConfigError, match=r"data.documents: applies to task mlm"):
        RunConfig.from_dict({"task": "lm", "data": {"documents": "file"}})


def test_the_shipped_config_is_mlm_with_nsp_on_speeches(tmp_path):
    run = load_run_config("tinyshakespeare_nsp", [f"data.dir={tmp_path}", "train.eval_blocks=8"])
    assert run.task == "mlm" and run.train.nsp and run.train.nsp_weight == 1.0
    (tmp_path / "input.txt").write_text("A:\nline one\nline two\n\nB:\nthree\n", encoding="utf-8")
    task = task_from_run(dataclasses.replace(run, data=dataclasses.replace(
        run.data, loading="memory", valid_fraction=0.0)))  # fmt: skip
    assert isinstance(task, NextSentenceTask) and task.batch_size == 64


def test_ranks_share_out_one_global_batch(tmp_path):
    # Two ranks draw the same global batch (pairs and masks) and keep rows r, r + 2, ...;
    # together they hold the batch one process would draw for twice the pairs.
    single = task_from_run(_run(tmp_path, max_tokens=2 * 32 * 24))
    whole, _ = single.next_batch()
    for rank in (0, 1):
        task = task_from_run(_run(tmp_path))
        task.setup(TaskContext(dist=DistContext(rank=rank, world_size=2)))
        share, real = task.next_batch()
        assert real
        for part, full in zip(share, whole):
            width = part.size(-1) if part.dim() > 1 else None
            expected = full[rank::2] if width is None else full[rank::2, :width]
            assert torch.equal(part, expected)
