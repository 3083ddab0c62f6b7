"""task: span_corruption: T5's pre-training on one text file with the one trainer."""

from __future__ import annotations

import json

import pytest
import torch

from attnkit import checkpoints as ckpt
from attnkit.data.lm import load_lm_corpus
from attnkit.data.span_corruption import restore
from attnkit.errors import ConfigError
from attnkit.training.loop import Trainer
from attnkit.training.runconfig import RunConfig
from attnkit.training.tasks import TASK_CLASSES, SpanCorruptionTask

TEXT = "the quick brown fox jumps over the lazy dog. " * 30


def _run(tmp_path, model=None, **train) -> tuple[RunConfig, object]:
    path = tmp_path / "input.txt"
    tmp_path.mkdir(parents=True, exist_ok=True)
    path.write_text(TEXT, encoding="utf-8")
    train = {"max_steps": 6, "max_tokens": 256, "warmup_steps": 2, "schedule": "constant",
             "lr": 3e-3, "log_every": 1, "eval_every": 100, "save_every": 0, "eval_blocks": 4,
             **train}  # fmt: skip
    run = RunConfig.from_dict({
        "task": "span_corruption",
        "data": {"dir": str(tmp_path), "text": "input.txt", "block_size": 32},
        "tokenizer": {"kind": "char"},
        "model": {"d_model": 32, "num_heads": 2, "d_ff": 48, "num_encoder_layers": 1,
                  "num_decoder_layers": 1, "dropout": 0.0, "relative_buckets": 8,
                  "relative_max_distance": 16, **(model or {})},
        "train": train,
    })  # fmt: skip
    return run, load_lm_corpus(path)


def _task(tmp_path, **kw) -> SpanCorruptionTask:
    run, corpus = _run(tmp_path, **kw)
    task = TASK_CLASSES["span_corruption"](run, corpus)
    assert isinstance(task, SpanCorruptionTask)
    return task


def test_batches_are_corrupted_blocks_with_sentinels_past_the_tokenizer(tmp_path):
    task = _task(tmp_path)
    tok = task.tokenizer
    assert task.model_config.positions == "t5_relative"  # the t5_small_cpu preset
    # 32 tokens, 15% noise: 5 dropped in 2 spans; one sentinel id each after the tokenizer's.
    assert task.sentinels == [tok.vocab_size, tok.vocab_size + 1]
    assert task.model_config.src_vocab_size == tok.vocab_size + 2
    blocks, _ = task.train_blocks.sample(4, torch.Generator().manual_seed(0))
    batch = task.corrupt(blocks, torch.Generator().manual_seed(1))
    for row in range(4):
        src = [t for t in batch.src[row].tolist() if t != tok.pad_id]
        out = [t for t in batch.tgt_out[row].tolist() if t != tok.pad_id]
        assert src[-1] == tok.eos_id and out[-1] == tok.eos_id
        assert batch.tgt_in[row, 0] == tok.bos_id
        assert restore(src[:-1], out[:-1], task.sentinels) == blocks[row].tolist()
        assert [t for t in src if t in task.sentinels] == task.sentinels
        assert len(out) - 1 - 2 == 5  # the dropped tokens, besides the two sentinels


def test_the_t5_model_learns_and_its_checkpoint_loads(tmp_path):
    run, corpus = _run(tmp_path, max_steps=40, eval_every=40, save_every=40, lr=1e-2)
    trainer = Trainer(run, TASK_CLASSES["span_corruption"](run, corpus), tmp_path / "run",
                      progress=False)  # fmt: skip
    summary = trainer.fit()
    records = [json.loads(x) for x in (trainer.out_dir / "metrics.jsonl").read_text().split("\n")
               if x]  # fmt: skip
    train = [r["loss"] for r in records if r["split"] == "train"]
    assert all(torch.isfinite(torch.tensor(train)))
    assert sum(train[-5:]) / 5 < 0.85 * sum(train[:5]) / 5  # ~0.75 seen
    valid = summary["valid"]
    assert valid["loss"] > 0 and valid["ppl"] == pytest.approx(torch.tensor(valid["loss"]).exp(),
                                                               rel=1e-4)  # fmt: skip
    loaded = ckpt.load_model(trainer.out_dir, "cpu")
    assert loaded.family.name == "transformer" and loaded.config == trainer.model.config


def test_evaluation_is_repeatable_and_the_noise_resumes(tmp_path):
    task = _task(tmp_path)
    torch.manual_seed(0)
    model = task.build_model()
    assert task.evaluate(model) == task.evaluate(model)
    state = {k: v.clone() for k, v in task.state_dict().items()}
    first, _ = task.next_batch()
    task.load_state_dict(state)
    again, _ = task.next_batch()
    for a, b in ((first.src, again.src), (first.tgt_out, again.tgt_out)):
        assert torch.equal(a, b)


def test_a_vocabulary_without_room_for_the_sentinels_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="sentinels"):
        _task(tmp_path, model={"src_vocab_size": 20, "tgt_vocab_size": 20})


def test_mask_prob_is_the_noise_density(tmp_path):
    task = _task(tmp_path, mask_prob=0.5)
    assert task.noise_density == 0.5 and len(task.sentinels) == 5  # 16 dropped, 5 spans


def test_the_shipped_config_builds_a_t5(tmp_path):

    from attnkit.models import TransformerConfig
    from attnkit.training.runconfig import load_run_config

    run = load_run_config("t5_span_corruption", [f"data.dir={tmp_path}", "data.text=input.txt"])
    assert run.task == "span_corruption" and run.train.mask_prob == 0.15
    _, corpus = _run(tmp_path)
    task = SpanCorruptionTask(run, corpus)
    c = task.model_config
    assert isinstance(c, TransformerConfig) and c.positions == "t5_relative"
    assert (c.d_model, c.activation, task.block, len(task.sentinels)) == (256, "gated_gelu", 64, 3)


def test_position_lr_scale_reaches_the_trainers_optimizer_and_its_checkpoint(tmp_path):
    run, corpus = _run(tmp_path, max_steps=4, save_every=4, position_lr_scale=10.0)
    trainer = Trainer(run, TASK_CLASSES["span_corruption"](run, corpus), tmp_path / "run",
                      progress=False)  # fmt: skip
    trainer.fit()
    groups = trainer.optimizer.param_groups
    assert [g["lr_scale"] for g in groups] == [1.0, 10.0]
    assert groups[1]["lr"] == pytest.approx(10.0 * groups[0]["lr"])
    assert len(groups[1]["params"]) == 2  # the encoder's and the decoder's bias table
    state = ckpt.load_checkpoint(ckpt.latest_checkpoint(trainer.out_dir))
    assert state.trainer_state["run"]["train"]["position_lr_scale"] == 10.0
    # a model without learned relative positions: the key names itself
    plain, corpus = _run(tmp_path / "plain", model={"positions": "sinusoidal"},
                         position_lr_scale=10.0)  # fmt: skip
    with pytest.raises(ConfigError, match="position_lr_scale"):
        Trainer(plain, TASK_CLASSES["span_corruption"](plain, corpus), tmp_path / "plain_run",
                progress=False)  # fmt: skip
