"""The instruction task: answer-only loss, packing, held-out split, a few steps learn."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from chat_helpers import chatml_tokenizer

from attnkit.data.instructions import read_instructions
from attnkit.errors import ConfigError
from attnkit.training.loop import Trainer
from attnkit.training.runconfig import RunConfig
from attnkit.training.tasks import InstructionTask, task_from_run

CAPITALS = [("France", "Paris"), ("Italy", "Rome"), ("Spain", "Madrid"), ("Peru", "Lima")]


def _records(n: int = 24) -> list[dict]:
    out = []
    for i in range(n):
        country, city = CAPITALS[i % len(CAPITALS)]
        if i % 2:
            out.append({"prompt": f"Capital of {country}?", "completion": f" {city}."})
        else:
            out.append({"messages": [{"role": "system", "content": "Be brief."},
                                     {"role": "user", "content": f"Capital of {country}?"},
                                     {"role": "assistant", "content": f"{city}."}]})  # fmt: skip
    return out


def _run(tmp_path, **data) -> RunConfig:
    path = tmp_path / "train.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in _records()) + "\n", encoding="utf-8")
    return RunConfig.from_dict(
        {
            "task": "instruction",
            "data": {"dir": str(tmp_path), "train": "train.jsonl", "valid": None, **data},
            "model": {"family": "decoder_only", "preset": "small", "d_model": 32,
                      "num_heads": 2, "d_ff": 64, "num_layers": 1, "max_len": 96,
                      "dropout": 0.0},
            "train": {"max_tokens": 256, "schedule": "constant", "lr": 3e-3, "warmup_steps": 0,
                      "log_every": 1, "eval_every": 100, "save_every": 0, "max_steps": 12},
        }
    )  # fmt: skip


def test_the_loss_counts_answer_tokens_only(tmp_path):
    task = InstructionTask(_run(tmp_path), chatml_tokenizer())
    torch.manual_seed(0)
    model = task.build_model().eval()
    (x, y), real = task.next_batch()
    sums = task.loss(model, (x, y))
    # By hand: every position's loss, kept where the target is an answer token.
    logits = model(x).logits
    every = F.cross_entropy(logits.flatten(0, 1), y.flatten().clamp(min=0), reduction="none")
    answer = (y.flatten() >= 0).float()
    assert real and sums.tokens == int(answer.sum()) < y.numel() // 2
    assert torch.allclose(sums.loss, (every * answer).sum())


def test_held_out_tail_and_description(tmp_path):
    task = InstructionTask(_run(tmp_path, valid_fraction=0.25), chatml_tokenizer())
    assert task.train_set.truncated == task.train_set.dropped == 0
    assert len(task.train_set.sequences) == 18 and len(task.valid_set.sequences) == 6
    assert task.describe().startswith("18 training examples (")
    assert "6 validation examples" in task.describe()


def test_packing_fills_blocks(tmp_path):
    tok = chatml_tokenizer()
    task = InstructionTask(_run(tmp_path, pack=True, block_size=32), tok)
    full = read_instructions(tmp_path / "train.jsonl", tok, max_len=32)
    kept = full.sequences[: len(task.train_set.sequences)]
    assert task.block == 32
    assert all(len(s.ids) == 33 for s in task.train_sequences[:-1])
    answers = sum(sum(s.scored[1:]) for s in task.train_sequences)
    assert answers == sum(sum(s.scored) for s in kept) - kept[0].scored[0]


def test_a_few_steps_lower_the_validation_loss(tmp_path):
    run = _run(tmp_path, valid_fraction=0.25)
    task = InstructionTask(run, chatml_tokenizer())
    trainer = Trainer(run, task, tmp_path / "run", progress=False)
    before = trainer.evaluate()["loss"]
    trainer.fit()
    after = trainer.evaluate()["loss"]
    assert after < before - 0.5


def test_instruction_needs_a_pretrained_tokenizer(tmp_path):
    with pytest.raises(ConfigError, match="task: instruction fine-tunes a pretrained"):
        task_from_run(_run(tmp_path))


def test_keys_of_other_tasks_are_refused(tmp_path):
    with pytest.raises(
        ConfigError,
        match="data.text: applies to task lm or mlm or span_corruption, not instruction",
    ):
        RunConfig.from_dict({"task": "instruction", "data": {"text": "x.txt"}})
