"""The training loop: learning, bit-exact resume, grad accumulation, logs."""

import json

import pytest
import torch

from attnkit.checkpoints import load_model
from attnkit.data.synthetic import number_splits
from attnkit.data.tokenizers import CharTokenizer
from attnkit.training.loop import Trainer
from attnkit.training.runconfig import RunConfig
from attnkit.training.tasks import TranslationTask

PAIRS = number_splits(200, 20, 0, low=1, high=999, seed=0)


def _run(**train) -> RunConfig:
    return RunConfig.from_dict(
        {
            "model": {"preset": "small", "d_model": 32, "num_heads": 2, "d_ff": 64,
                      "num_encoder_layers": 1, "num_decoder_layers": 1, "max_len": 96},
            "train": {"max_tokens": 600, "warmup_steps": 10, "log_every": 1, "eval_every": 4,
                      "save_every": 3, "valid_bleu_sentences": 5, **train},
        }
    )  # fmt: skip


def _trainer(tmp_path, **train) -> Trainer:
    texts = [s for s, _ in PAIRS["train"]] + [t for _, t in PAIRS["train"]]
    run = _run(**train)
    task = TranslationTask(run, CharTokenizer.train(texts), PAIRS["train"], PAIRS["valid"])
    return Trainer(run, task, tmp_path, progress=False)


def _params(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_resume_gives_bit_identical_weights(tmp_path):
    straight = _trainer(tmp_path / "a", max_steps=7)
    straight.fit()

    first = _trainer(tmp_path / "b", max_steps=3)
    first.fit()
    resumed = _trainer(tmp_path / "b", max_steps=7)
    assert resumed.resume() and resumed.step == 3
    resumed.fit()

    a, b = _params(straight.model), _params(resumed.model)
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k

    # The resumed run logs the same training losses, step for step.
    def train_log(path):
        records = map(json.loads, path.read_text().splitlines())
        return [(r["step"], r["loss"]) for r in records if r["split"] == "train"]

    assert train_log(tmp_path / "a" / "metrics.jsonl") == train_log(
        tmp_path / "b" / "metrics.jsonl"
    )


def test_loss_goes_down_and_outputs_are_written(tmp_path):
    trainer = _trainer(
        tmp_path, max_steps=60, eval_every=60, save_every=0, schedule="constant", lr=3e-3
    )
    trainer.fit()
    records = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    train_losses = [r["loss"] for r in records if r["split"] == "train"]
    assert sum(train_losses[-5:]) / 5 < 0.7 * sum(train_losses[:5]) / 5
    valid = [r for r in records if r["split"] == "valid"][-1]
    assert {"loss", "ppl", "bleu", "exact_match"} <= valid.keys()
    assert (tmp_path / "loss.png").stat().st_size > 1000
    model = load_model(tmp_path).model
    for k, v in trainer.model.state_dict().items():
        assert torch.equal(model.state_dict()[k], v.cpu()), k


def test_keeps_only_the_last_checkpoints(tmp_path):
    trainer = _trainer(tmp_path, max_steps=9, save_every=2, keep_last=2, eval_every=100)
    trainer.fit()
    kept = sorted(
        p.name for p in (tmp_path / "checkpoints").iterdir() if not p.name.startswith(".")
    )
    assert kept == ["step_00000008", "step_00000009"]


def test_a_model_vocabulary_larger_than_the_tokenizer_trains_and_loads(tmp_path):
    # e.g. a vocabulary rounded up to a multiple of 64 for faster matmuls
    texts = [s for s, _ in PAIRS["train"]] + [t for _, t in PAIRS["train"]]
    tokenizer = CharTokenizer.train(texts)
    run = _run(max_steps=3)
    run.model.update(src_vocab_size=128, tgt_vocab_size=128, share_embeddings="all")
    trainer = Trainer(
        run, TranslationTask(run, tokenizer, PAIRS["train"]), tmp_path, progress=False
    )
    trainer.fit()
    loaded = load_model(tmp_path, "cpu")
    assert loaded.config.tgt_vocab_size == 128
    assert loaded.tokenizer.vocab_size == tokenizer.vocab_size < 128


def test_checkpoints_of_the_previous_trainer_state_format_still_resume(tmp_path):
    """attnkit 0.1.0 kept the translation stream's position at the top of trainer_state."""
    from attnkit.checkpoints import checkpoint_dir
    from attnkit.checkpoints.files import load_checkpoint, save_checkpoint
    from attnkit.errors import CheckpointError
    from attnkit.training.trainer_state import upgrade_state

    first = _trainer(tmp_path, max_steps=3, save_every=3)
    first.fit()
    directory = checkpoint_dir(tmp_path, 3)
    state = load_checkpoint(directory)
    old = dict(state.trainer_state)
    old.update(old.pop("task_state"))  # back to format 1: epoch, batch_in_epoch at the top
    del old["format"], old["task"]
    save_checkpoint(directory, model_state=state.model_state, config=state.config,
                    tokenizer_json=state.tokenizer_json, trainer_state=old,
                    optimizer_state=state.optimizer_state)  # fmt: skip
    resumed = _trainer(tmp_path, max_steps=5)
    assert resumed.resume() and resumed.step == 3
    assert resumed.task.state_dict() == first.task.state_dict()
    with pytest.raises(CheckpointError, match="cannot resume a lm run"):
        upgrade_state({"step": 3}, "lm", directory)


def test_a_time_budget_measures_the_remaining_steps_once_per_step(tmp_path, monkeypatch):
    """The budget's step estimate (bar total, schedule end) is computed once per update."""
    import attnkit.training.loop as loop

    calls = []

    def counting(done, elapsed, budget):
        calls.append(done)
        return None if done < 10 else 0  # "the budget ends now"

    monkeypatch.setattr(loop, "remaining_steps", counting)
    trainer = _trainer(tmp_path, max_steps=12, max_minutes=10.0, eval_every=100, save_every=0,
                       schedule="cosine", decay_to_budget=True, warmup_steps=1)  # fmt: skip
    trainer.fit()
    assert calls == list(range(1, 13))
    # Re-aimed before step 12 from the estimate measured after step 11 (11 + 0).
    assert trainer.scheduler.lr_lambdas[0].total_steps == 11
