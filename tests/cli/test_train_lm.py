"""``attnkit train`` with ``task: lm`` and ``task: mlm`` end to end on a tiny text."""

import json
from pathlib import Path

import pytest

from attnkit import checkpoints as ckpt
from attnkit.cli.main import main

CONFIG = """
task: {task}
data: {{dir: {dir}, text: tiny.txt, valid_fraction: 0.2}}
tokenizer: {{kind: char}}
model: {{preset: small, d_model: 32, num_heads: 2, d_ff: 64, num_layers: 2, max_len: 16,
        dropout: 0.0}}
train: {{max_steps: {steps}, max_tokens: {max_tokens}, schedule: constant, lr: 0.01,
        warmup_steps: 5, log_every: 10, eval_every: {steps}, save_every: 0}}
"""

# A short text the model can learn in a few dozen steps.
TEXT = "the cat sat on the mat. the dog sat on the log. " * 40


def _write(root, task, steps=60, max_tokens=256):
    (root / "tiny.txt").write_text(TEXT, encoding="utf-8")
    config = root / f"{task}.yaml"
    text = CONFIG.format(task=task, dir=root, steps=steps, max_tokens=max_tokens)
    config.write_text(text, encoding="utf-8")
    return config


def _records(out):
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]


# MLM scores only the ~15% masked tokens, so it needs bigger batches and more steps.
@pytest.mark.parametrize(
    ("task", "steps", "max_tokens", "ratio"), [("lm", 60, 256, 0.6), ("mlm", 150, 1024, 0.75)]
)
def test_train_learns_and_checkpoints_the_right_family(
    tmp_path, task, steps, max_tokens, ratio, capsys
):
    config = _write(tmp_path, task, steps, max_tokens)
    out = tmp_path / "run"
    assert main(["train", "--config", str(config), "--out", str(out), "--no-progress"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["step"] == steps
    train = [r["loss"] for r in _records(out) if r["split"] == "train"]
    # The first record comes after 10 steps (unigram level, ~2.2 nats); context lowers it.
    assert train[-1] < ratio * train[0], train
    latest = ckpt.latest_checkpoint(out)
    family = json.loads((latest / "config.json").read_text())["family"]
    assert family == {"lm": "decoder_only", "mlm": "encoder_only"}[task]
    assert json.loads((out / "run.json").read_text())["task"] == task


def test_generate_continues_a_trained_lm(tmp_path, capsys):
    config = _write(tmp_path, "lm", steps=80)
    out = tmp_path / "run"
    assert main(["train", "--config", str(config), "--out", str(out), "--no-progress"]) == 0
    capsys.readouterr()
    argv = ["generate", "--checkpoint", str(out), "--prompt", "the cat sat on the",
            "--max-new-tokens", "5", "--temperature", "0"]  # fmt: skip
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert text.startswith("the cat sat on the") and text.strip() != "the cat sat on the"


def test_lm_task_without_a_text_file_names_the_field(tmp_path, capsys):
    config = _write(tmp_path, "lm")
    out = tmp_path / "run"
    argv = ["train", "--config", str(config), "--out", str(out), "--set", "data.text=null"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "data.text" in err and len(err.splitlines()) == 1
    assert not out.exists()


@pytest.mark.parametrize("task", ["lm", "mlm"])
def test_a_killed_language_model_run_resumes_to_the_same_weights(tmp_path, task):
    import os
    import subprocess
    import sys

    import torch

    config = _write(tmp_path, task, steps=8)
    sets = ["--set", "train.save_every=4", "--set", "model.dropout=0.1",  # RNGs matter
            "--set", "train.schedule=cosine"]  # the schedule's position matters  # fmt: skip
    whole, broken = tmp_path / "whole", tmp_path / "broken"
    assert main(["train", "--config", str(config), "--out", str(whole), "--no-progress",
                 *sets]) == 0  # fmt: skip
    # SIGKILL mid-step 6; one thread, as in this process (conftest), for the same float sums
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    runner = Path(__file__).parents[1] / "training" / "kill_runner.py"
    killed = subprocess.run(
        [sys.executable, str(runner), "train_step:6", "--config", str(config), "--out",
         str(broken), "--no-progress", *sets],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert killed.returncode != 0
    assert [p.name for p in (broken / "checkpoints").iterdir()] == ["step_00000004"]
    assert main(["train", "--config", str(config), "--out", str(broken), "--no-progress",
                 "--resume", *sets]) == 0  # fmt: skip
    a = ckpt.load_checkpoint(whole / "checkpoints" / "step_00000008").model_state
    b = ckpt.load_checkpoint(broken / "checkpoints" / "step_00000008").model_state
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    steps = [json.loads(r)["step"] for r in (broken / "metrics.jsonl").read_text().splitlines()]
    assert steps == sorted(steps) and steps[-1] == 8  # no records from the killed steps twice


def test_lm_resume_with_nothing_to_resume_changes_nothing(tmp_path, capsys):
    config = _write(tmp_path, "lm", steps=2)
    out = tmp_path / "run"
    out.mkdir()
    assert main(["train", "--config", str(config), "--out", str(out), "--resume"]) == 2
    assert "nothing to resume" in capsys.readouterr().err
    assert list(out.iterdir()) == []


@pytest.fixture(scope="module")
def mlm_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("mlm")
    config = _write(root, "mlm", steps=150, max_tokens=1024)
    out = root / "run"
    assert main(["train", "--config", str(config), "--out", str(out), "--no-progress"]) == 0
    return root, out


def test_an_mlm_checkpoint_opens_in_every_command_that_applies(mlm_run, tmp_path, capsys):
    root, out = mlm_run
    capsys.readouterr()
    assert main(["fill-mask", "--checkpoint", str(out), "--text", "sat on the m[MASK]t",
                 "--top-k", "3"]) == 0  # fmt: skip
    filled, candidates = capsys.readouterr().out.splitlines()
    assert filled == "sat on the mat"  # learned from "... on the mat."
    assert candidates.startswith("mask 1: 'a' ")
    assert main(["evaluate", "--checkpoint", str(out), "--text", str(root / "tiny.txt"),
                 "--json"]) == 0  # fmt: skip
    result = json.loads(capsys.readouterr().out)
    assert result["objective"] == "masked_lm" and 1.0 <= result["perplexity"] < 5.0
    png = tmp_path / "map.png"
    assert main(["attention", "--checkpoint", str(out), "--text", "the dog sat",
                 "--out", str(png)]) == 0  # fmt: skip
    assert png.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize(
    ("command", "extra"),
    [("translate", []), ("generate", ["--max-new-tokens", "2"])],
)
def test_commands_that_do_not_apply_name_the_ones_that_do(mlm_run, capsys, command, extra):
    _, out = mlm_run
    capsys.readouterr()
    assert main([command, "--checkpoint", str(out), *extra]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "encoder_only checkpoint (a masked language model)" in err
    assert "attnkit fill-mask" in err


def test_fill_mask_refuses_text_without_a_mask_by_name(mlm_run, capsys):
    _, out = mlm_run
    assert main(["fill-mask", "--checkpoint", str(out), "--text", "no mask here"]) == 2
    assert "[MASK]" in capsys.readouterr().err


def test_a_batch_beyond_memory_is_refused_before_it_is_sampled(tmp_path, capsys):
    """An LM batch is train.max_tokens worth of blocks whatever the text's length: 10**15
    tokens are refused by a size estimate, naming the key, before anything is written."""
    config = _write(tmp_path, "lm")
    out = tmp_path / "run"
    argv = ["train", "--config", str(config), "--out", str(out), "--no-progress"]
    assert main([*argv, "--set", f"train.max_tokens={10**15}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "train.max_tokens=1000000000000000" in err
    assert "GiB of memory" in err and not out.exists()
