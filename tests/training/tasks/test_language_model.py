"""The lm and mlm tasks get every trainer feature: learning, checkpoints pruned to keep_last,
gradient accumulation, the non-finite guard, a real compiled step, a loadable checkpoint."""

from __future__ import annotations

import json

import pytest
import torch

from attnkit import checkpoints as ckpt
from attnkit.data.lm import load_lm_corpus
from attnkit.errors import TrainingError
from attnkit.training.loop import Trainer
from attnkit.training.runconfig import RunConfig
from attnkit.training.tasks import TASK_CLASSES, CausalLMTask, LossSums, MaskedLMTask

TEXT = "abcdefgh" * 80  # the validation split (last 10%) continues the pattern
TASKS = ["lm", "mlm"]


def _trainer(tmp_path, task: str, *, model=None, **train) -> Trainer:
    path = tmp_path / "input.txt"
    tmp_path.mkdir(parents=True, exist_ok=True)
    path.write_text(TEXT, encoding="utf-8")
    train = {"max_steps": 6, "max_tokens": 128, "warmup_steps": 2, "schedule": "constant",
             "lr": 3e-3, "log_every": 1, "eval_every": 100, "save_every": 0, "eval_blocks": 4,
             **train}  # fmt: skip
    run = RunConfig.from_dict({
        "task": task,
        "data": {"dir": str(tmp_path), "text": "input.txt"},
        "tokenizer": {"kind": "char"},
        "model": {"preset": "small", "d_model": 32, "num_heads": 2, "d_ff": 64, "num_layers": 1,
                  "max_len": 16, "dropout": 0.0, **(model or {})},
        "train": train,
    })  # fmt: skip
    corpus = load_lm_corpus(path)
    return Trainer(run, TASK_CLASSES[task](run, corpus), tmp_path / "run", progress=False)


def _records(trainer):
    path = trainer.out_dir / "metrics.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_the_causal_lm_learns_and_its_checkpoint_loads(tmp_path):
    trainer = _trainer(tmp_path, "lm", max_steps=60, eval_every=30, save_every=30)
    summary = trainer.fit()
    train = [r["loss"] for r in _records(trainer) if r["split"] == "train"]
    valid = [r for r in _records(trainer) if r["split"] == "valid"]
    assert train[-1] < 0.5 * train[0]
    assert [r["step"] for r in valid] == [30, 60] and valid[-1]["loss"] < 1.0
    assert summary["step"] == 60 and summary["valid"]["loss"] == valid[-1]["loss"]
    loaded = ckpt.load_model(trainer.out_dir, "cpu")  # the latest checkpoint
    assert loaded.family.name == "decoder_only" and not loaded.model.training
    assert loaded.config == trainer.model.config
    x = trainer.task.corpus.train[:16][None]
    trainer.model.eval()
    torch.testing.assert_close(loaded.model(x).logits, trainer.model(x).logits)
    assert loaded.tokenizer.to_json() == trainer.task.tokenizer.to_json()


@pytest.mark.parametrize("task", TASKS)
def test_checkpoints_are_pruned_to_keep_last(tmp_path, task):
    trainer = _trainer(tmp_path, task, max_steps=6, save_every=1, keep_last=2)
    trainer.fit()
    assert [p.name for p in ckpt.list_checkpoints(trainer.out_dir)] == [
        "step_00000005", "step_00000006"
    ]  # fmt: skip


@pytest.mark.parametrize("task", TASKS)
def test_grad_accum_of_two_half_batches_equals_one_full_batch(tmp_path, task):
    # 8 blocks of 16 tokens in one batch, or 4 + 4 accumulated: the same blocks and
    # masks (both are drawn row by row), so in fp64 the same updates.
    full = _trainer(tmp_path / "full", task, max_tokens=8 * 16, grad_accum=1)
    half = _trainer(tmp_path / "half", task, max_tokens=4 * 16, grad_accum=2)
    for trainer in (full, half):
        trainer.model.double()  # in place: the optimizer keeps the same parameters
    for _ in range(3):
        a, b = full.train_step(), half.train_step()
        assert a["tokens"] == b["tokens"] > 0
        assert abs(a["loss"] - b["loss"]) < 1e-9
    for (name, p), q in zip(full.model.state_dict().items(), half.model.state_dict().values()):
        assert p.dtype == torch.float64
        assert (p - q).abs().max() <= 1e-6, name
    assert any(not torch.equal(p, q) for p, q in zip(  # and it did train
        full.model.state_dict().values(), _trainer(tmp_path / "fresh", task).model.state_dict()
        .values()))  # fmt: skip


def _poison(monkeypatch, cls, bad_steps: set[int]) -> None:
    """The task's loss is NaN at the given (1-based) training steps."""
    original = cls.loss
    calls: dict[int, int] = {}

    def loss(self, model, batch):
        step = calls[id(self)] = calls.get(id(self), 0) + 1
        out = original(self, model, batch)
        if step in bad_steps:
            return LossSums(out.loss * float("nan"), out.nll * float("nan"), out.tokens)
        return out

    monkeypatch.setattr(cls, "loss", loss)


@pytest.mark.parametrize(("task", "cls"), [("lm", CausalLMTask), ("mlm", MaskedLMTask)])
def test_a_nan_loss_is_skipped_and_counted_and_the_limit_stops_the_run(
    tmp_path, monkeypatch, task, cls
):
    _poison(monkeypatch, cls, {2, 3})
    trainer = _trainer(tmp_path / "skipped", task, max_steps=5, max_nonfinite=2)
    with pytest.warns(RuntimeWarning, match="non-finite loss; update skipped"):
        summary = trainer.fit()
    assert summary["step"] == 5 and summary["skipped_steps"] == 2
    assert [r["step"] for r in _records(trainer) if r["split"] == "skipped"] == [2, 3]
    assert trainer.scheduler.last_epoch == 3  # the skipped updates never stepped it

    _poison(monkeypatch, cls, set(range(2, 20)))
    stopped = _trainer(tmp_path / "stopped", task, max_steps=20, max_nonfinite=2)
    with pytest.warns(RuntimeWarning), pytest.raises(TrainingError) as error:
        stopped.fit()
    message = str(error.value)
    assert "\n" not in message and message.startswith("step 4: non-finite loss, 3 updates")
    assert ckpt.list_checkpoints(stopped.out_dir) == []  # nothing bad was saved


def test_the_fast_lm_step_really_compiles_and_matches_the_plain_step(tmp_path):
    # torch.compile for real (inductor's C++ code on the CPU): a few seconds for this model.
    from torch._dynamo.utils import counters

    plain = _trainer(tmp_path / "plain", "lm", fast="off")
    fast = _trainer(tmp_path / "fast", "lm", fast="on")
    assert (plain.compiled, fast.compiled) == (False, True)
    before = counters["stats"]["unique_graphs"]
    plain.fit()
    fast.fit()
    assert counters["stats"]["unique_graphs"] > before  # a graph was compiled
    losses = [[r["loss"] for r in _records(t) if r["split"] == "train"] for t in (plain, fast)]
    assert losses[1] == pytest.approx(losses[0], rel=1e-6)
    d = plain.model.config.d_model
    for (name, p), q in zip(plain.model.state_dict().items(), fast.model.state_dict().values()):
        if name.endswith("qkv_proj.bias"):
            # The key bias's true gradient is zero (softmax ignores a per-query constant):
            # Adam turns either path's rounding noise there into full-size steps.
            p, q = torch.cat([p[:d], p[2 * d :]]), torch.cat([q[:d], q[2 * d :]])
        torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-6, msg=name)


def test_a_key_of_another_task_is_refused_by_name(tmp_path):
    from attnkit.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^train.label_smoothing: applies to task translation"):
        RunConfig.from_dict({"task": "lm", "train": {"label_smoothing": 0.1}})
    with pytest.raises(
        ConfigError, match=r"^train.mask_prob: applies to task mlm or span_corruption, not lm"
    ):
        RunConfig.from_dict({"task": "lm", "train": {"mask_prob": 0.2}})
    with pytest.raises(ConfigError, match=r"^data.text: applies to task lm or mlm"):
        RunConfig.from_dict({"task": "translation", "data": {"text": "a.txt"}})
    run = RunConfig.from_dict({"task": "mlm", "train": {"mask_prob": 0.2}})
    assert RunConfig.from_dict(run.to_dict()) == run  # run.json reloads as a config
