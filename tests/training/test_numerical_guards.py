"""Numerical guards: non-finite updates are skipped, divergence stops cleanly, fp16 scales."""

from __future__ import annotations

import hashlib
import json
import warnings

import pytest
import torch

from attnkit import checkpoints as ckpt
from attnkit.cli.main import main
from attnkit.data.synthetic import number_splits
from attnkit.data.tokenizers import CharTokenizer
from attnkit.errors import ConfigError, TrainingError
from attnkit.training.loop import Trainer
from attnkit.training.runconfig import RunConfig
from attnkit.training.tasks import LossSums, TranslationTask

PAIRS = number_splits(80, 0, 0, low=1, high=999, seed=0)["train"]
MODEL = {"preset": "small", "d_model": 32, "num_heads": 2, "d_ff": 64,
         "num_encoder_layers": 1, "num_decoder_layers": 1, "max_len": 96}  # fmt: skip


def _trainer(tmp_path, **train) -> Trainer:
    # cpu_matmul fixed: "auto" may time extra loss calls on the first batch, which would
    # shift the steps _poison_loss counts.
    train = {"max_tokens": 400, "warmup_steps": 3, "log_every": 1, "eval_every": 1000,
             "save_every": 0, "cpu_matmul": "mkl", **train}  # fmt: skip
    run = RunConfig.from_dict({"model": MODEL, "train": train})
    texts = [s for s, _ in PAIRS] + [t for _, t in PAIRS]
    return Trainer(
        run, TranslationTask(run, CharTokenizer.train(texts), PAIRS), tmp_path, progress=False
    )


def _poison_loss(monkeypatch, bad_steps, on_first=None):
    """Make the training loss NaN at the given (1-based) steps; ``on_first(model)`` runs once.

    The task's loss is called once per step (grad_accum 1; evaluation scores on its own).
    """
    original = TranslationTask.loss
    calls: dict[int, int] = {}
    seen = []

    def loss(self, model, batch):
        step = calls[id(self)] = calls.get(id(self), 0) + 1
        bad = step in bad_steps
        if bad and on_first is not None and not seen:
            on_first(model)
        out = original(self, model, batch)
        if bad:
            seen.append(step)
            return LossSums(out.loss * float("nan"), out.nll * float("nan"), out.tokens)
        return out

    monkeypatch.setattr(TranslationTask, "loss", loss)
    return seen


def _snapshot(trainer):
    return {k: v.clone() for k, v in trainer.model.state_dict().items()}


def _digest(directory) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


def test_a_nonfinite_loss_skips_the_update_with_a_warning(tmp_path, monkeypatch):
    trainer = _trainer(tmp_path, max_steps=6, max_nonfinite=2)
    _poison_loss(monkeypatch, {3, 4})
    trainer.train_step()
    trainer.train_step()
    before = _snapshot(trainer)
    adam_step = float(trainer.optimizer.state_dict()["state"][0]["step"])
    for step in (3, 4):
        # One warning per streak (its first skip); each skip is logged in metrics.jsonl.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            stats = trainer.train_step()
        said = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
        assert said == (["step 3: non-finite loss; update skipped (more than "
                         "train.max_nonfinite=2 in a row stop the run; each is logged)"]
                        if step == 3 else [])  # fmt: skip
        assert stats["skipped"] == "non-finite loss"
        # No update at all: weights, Adam state and schedule stay; gradients are gone.
        after = _snapshot(trainer)
        assert all(torch.equal(before[k], after[k]) for k in before)
        assert float(trainer.optimizer.state_dict()["state"][0]["step"]) == adam_step
        assert trainer.scheduler.last_epoch == 2
        assert all(p.grad is None for p in trainer.model.parameters())
    assert trainer.nonfinite_streak == 2
    stats = trainer.train_step()  # finite again: trains, and the streak resets
    assert not stats["skipped"] and trainer.nonfinite_streak == 0
    assert trainer.scheduler.last_epoch == 3 and trainer.skipped_steps == 2
    assert any(not torch.equal(before[k], v) for k, v in _snapshot(trainer).items())


def test_skipped_steps_are_logged_and_training_goes_on(tmp_path, monkeypatch):
    trainer = _trainer(tmp_path, max_steps=6, max_nonfinite=2)
    _poison_loss(monkeypatch, {2, 3, 5})
    with pytest.warns(RuntimeWarning, match="non-finite loss"):
        summary = trainer.fit()
    assert summary["step"] == 6
    records = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["split"] == "skipped"] == [2, 3, 5]
    assert trainer.scheduler.last_epoch == 3


def test_too_many_nonfinite_steps_stop_training_and_keep_the_last_checkpoint(tmp_path, monkeypatch):
    trainer = _trainer(tmp_path, max_steps=20, save_every=4, max_nonfinite=2)
    good = ckpt.checkpoint_dir(tmp_path, 4)
    digests = {}
    _poison_loss(monkeypatch, set(range(5, 21)), on_first=lambda t: digests.update(_digest(good)))
    with pytest.warns(RuntimeWarning), pytest.raises(TrainingError) as error:
        trainer.fit()
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith("step 7: non-finite loss, 3 updates in a row")
    assert "train.max_nonfinite=2" in message and str(good) in message
    assert "train.lr" in message and "fp32" in message and "clip_norm" in message
    # The last good checkpoint is byte-for-byte what it was; nothing newer was written.
    assert digests and _digest(good) == digests
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == [good.name]


def test_weights_holding_nan_are_never_checkpointed(tmp_path, monkeypatch):
    trainer = _trainer(tmp_path, max_steps=20, save_every=4, max_nonfinite=10)
    good = ckpt.checkpoint_dir(tmp_path, 4)

    def diverge(model):  # weights go bad (as after an unguarded update)
        with torch.no_grad():
            next(model.parameters()).fill_(float("nan"))

    _poison_loss(monkeypatch, {5}, on_first=diverge)
    with pytest.warns(RuntimeWarning), pytest.raises(TrainingError, match="step 8: the weights"):
        trainer.fit()
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == [good.name]


def test_the_cli_stops_with_one_line_and_exit_code_1(tmp_path, monkeypatch, capsys):
    (tmp_path / "train.en").write_text("".join(s + "\n" for s, _ in PAIRS), encoding="utf-8")
    (tmp_path / "train.de").write_text("".join(t + "\n" for _, t in PAIRS), encoding="utf-8")
    config = tmp_path / "run.yaml"
    config.write_text(
        json.dumps(
            {
                "data": {"dir": str(tmp_path), "src_lang": "en", "tgt_lang": "de", "valid": None},
                "tokenizer": {"kind": "char"},
                "model": MODEL,
                "train": {
                    "max_steps": 10,
                    "max_tokens": 400,
                    "save_every": 2,
                    "max_nonfinite": 1,
                    "cpu_matmul": "mkl",
                },
            }
        ),  # fmt: skip
        encoding="utf-8",
    )
    _poison_loss(monkeypatch, set(range(3, 11)))
    with pytest.warns(RuntimeWarning):
        code = main(["train", "--config", str(config), "--out", str(tmp_path / "out"),
                     "--no-progress"])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code == 1
    assert len(err.splitlines()) == 1
    assert err.startswith("attnkit train: error: step 4: non-finite loss, 2 updates in a row")
    assert ckpt.latest_checkpoint(tmp_path / "out") == ckpt.checkpoint_dir(tmp_path / "out", 2)


def test_max_nonfinite_is_validated():
    with pytest.raises(ConfigError, match="train.max_nonfinite: must be >= 0"):
        RunConfig.from_dict({"train": {"max_nonfinite": -1}})


# -- fp16 loss scaling ----------------------------------------------------------------


def test_fp16_uses_a_loss_scaler_on_the_cpu_and_resumes_exactly(tmp_path):
    # The first ~6 updates overflow while the scaler finds its scale; then it trains.
    straight = _trainer(tmp_path / "a", max_steps=12, precision="fp16")
    assert straight.scaler.is_enabled()
    straight.fit()
    assert 0 < straight.skipped_steps < 8

    first = _trainer(tmp_path / "b", max_steps=8, precision="fp16")
    first.fit()
    saved = json.loads((ckpt.checkpoint_dir(tmp_path / "b", 8) / "trainer_state.json").read_text())
    assert saved["scaler"]["scale"] == first.scaler.get_scale() > 0  # JSON, not a pickle
    resumed = _trainer(tmp_path / "b", max_steps=12, precision="fp16")
    assert resumed.resume()
    assert resumed.scaler.state_dict() == first.scaler.state_dict()
    resumed.fit()
    for key, value in straight.model.state_dict().items():
        assert torch.equal(value, resumed.model.state_dict()[key]), key
    assert resumed.scaler.state_dict() == straight.scaler.state_dict()


def test_fp16_overflows_are_skipped_by_the_scaler_and_not_counted(tmp_path, recwarn):
    trainer = _trainer(tmp_path, max_steps=30, precision="fp16", max_nonfinite=0)
    # A loss scale far too high: the fp16 gradients overflow until the scaler has
    # halved it enough. Those skips are loss-scale calibration, not divergence.
    trainer.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**24)
    before = _snapshot(trainer)
    stats = trainer.train_step()
    assert stats["skipped"].startswith("fp16 gradient overflow")
    assert trainer.scaler.get_scale() == 2.0**23
    assert all(torch.equal(before[k], v) for k, v in _snapshot(trainer).items())
    trainer.fit()  # would raise at the first counted skip (max_nonfinite=0)
    assert trainer.step == 30 and 10 < trainer.skipped_steps < 25
    assert trainer.scaler.get_scale() <= 2.0**12 and trainer.nonfinite_streak == 0
    assert not [w for w in recwarn if "non-finite" in str(w.message)]


def test_fp16_with_fsdp_is_refused_by_name(tmp_path):
    from attnkit.training.distributed import DistContext

    run = RunConfig.from_dict(
        {"model": MODEL, "train": {"precision": "fp16", "distributed": "fsdp"}}
    )
    texts = [s for s, _ in PAIRS] + [t for _, t in PAIRS]
    with pytest.raises(ConfigError, match="train.precision: fp16 .*train.distributed=fsdp"):
        Trainer(
            run,
            TranslationTask(run, CharTokenizer.train(texts), PAIRS),
            tmp_path,
            distributed=DistContext(rank=0, world_size=2),  # refused before any collective
        )


def test_a_run_whose_every_update_was_skipped_is_an_error_and_saves_nothing(tmp_path, monkeypatch):
    """train.lora.alpha 1e308 or weights near float32's maximum: every loss non-finite,
    but fewer than train.max_nonfinite steps. Not a success: no checkpoint, an error."""
    trainer = _trainer(tmp_path, max_steps=4, save_every=2, max_nonfinite=10)
    _poison_loss(monkeypatch, {1, 2, 3, 4})
    with pytest.warns(RuntimeWarning), pytest.raises(TrainingError) as error:
        trainer.fit()
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith("all 4 updates of this run were skipped (non-finite loss)")
    assert "no checkpoint was written" in message and "train.lora.alpha" in message
    assert not (tmp_path / "checkpoints").exists()
    # What was logged is strict JSON: the NaN losses are null, with the reason beside.
    records = [json.loads(x, parse_constant=pytest.fail)
               for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]  # fmt: skip
    train = [r for r in records if r["split"] == "train"]
    assert train[0]["loss"] is None and train[0]["nonfinite"]["loss"] == "NaN"


def test_a_run_with_one_applied_update_succeeds_and_saves(tmp_path, monkeypatch):
    trainer = _trainer(tmp_path, max_steps=4, save_every=2, max_nonfinite=10)
    _poison_loss(monkeypatch, {1, 2, 3})  # step 4 learns
    with pytest.warns(RuntimeWarning):
        summary = trainer.fit()
    assert summary["skipped_steps"] == 3
    # Step 2's save found nothing applied yet (the start's weights): only step 4 is saved.
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == ["step_00000004"]
