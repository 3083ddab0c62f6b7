"""Crash safety: ``attnkit train`` killed with SIGKILL, then ``--resume``d, ends bit-identical.

Each run is the real CLI in a subprocess (``python -m attnkit train``) on tiny
data. Deterministic crash points come from a trainer callback that
``kill_runner.py`` injects (the library carries no test hook); one more kill
lands wherever the run happens to be after its first checkpoint.
After each crash: no half-written checkpoint is listed, every listed one
loads, and resuming to the same final step gives the same weights, bit for
bit, as a run that was never interrupted (dropout on, so RNG state matters).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from attnkit import checkpoints as ckpt
from attnkit.data.synthetic import number_splits

pytestmark = pytest.mark.skipif(
    sys.platform == "win32", reason="SIGKILL and directory fsync are POSIX"
)

MAX_STEPS = 30
CONFIG = """
data: {{dir: {dir}, src_lang: en, tgt_lang: de, valid: null, max_len: 64}}
tokenizer: {{kind: char}}
model: {{preset: small, d_model: 32, num_heads: 2, d_ff: 64,
        num_encoder_layers: 1, num_decoder_layers: 1, max_len: 96}}
train: {{max_steps: {steps}, max_tokens: 300, warmup_steps: 5, log_every: 1,
        eval_every: 1000, save_every: 5, keep_last: 3, seed: 7}}
"""


@pytest.fixture(scope="module")
def config(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("crash_data")
    pairs = number_splits(60, 0, 0, low=1, high=999, seed=0)["train"]
    (root / "train.en").write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
    (root / "train.de").write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")
    path = root / "tiny.yaml"
    path.write_text(CONFIG.format(dir=root, steps=MAX_STEPS), encoding="utf-8")
    return path


KILL_RUNNER = Path(__file__).with_name("kill_runner.py")


def _command(config: Path, out: Path, *extra: str, kill_at: str | None = None) -> list[str]:
    start = [sys.executable, "-m", "attnkit", "train"]
    if kill_at is not None:  # the same command, with a trainer callback that SIGKILLs
        start = [sys.executable, str(KILL_RUNNER), kill_at]
    return [*start, "--config", str(config), "--out", str(out), "--no-progress", *extra]


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1"}  # the same thread count in every run


def _train(config: Path, out: Path, *extra: str, kill_at: str | None = None) -> int:
    result = subprocess.run(
        _command(config, out, *extra, kill_at=kill_at), env=_env(), capture_output=True,
        text=True,
    )  # fmt: skip
    if kill_at is None:
        assert result.returncode == 0, result.stderr[-2000:]
    return result.returncode


def _final_weights(out: Path) -> dict[str, torch.Tensor]:
    return ckpt.load_tensors(ckpt.checkpoint_dir(out, MAX_STEPS) / ckpt.MODEL_FILE)


def _train_losses(out: Path) -> list[tuple[int, float]]:
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["loss"]) for r in records if r["split"] == "train"]


def _listed_checkpoints_are_complete(out: Path) -> list[int]:
    """Steps of the listed checkpoints, each of which must load completely."""
    steps = []
    for path in sorted((out / "checkpoints").glob("step_*")):
        state = ckpt.load_checkpoint(path)  # raises on a missing or truncated file
        assert state.trainer_state is not None and state.optimizer_state is not None
        assert state.trainer_state["step"] == int(path.name.split("_")[1])
        steps.append(state.trainer_state["step"])
    return steps


def _hidden(out: Path) -> list[str]:
    return sorted(p.name for p in (out / "checkpoints").iterdir() if p.name.startswith("."))


@pytest.fixture(scope="module")
def reference(config, tmp_path_factory) -> Path:
    """The same run, never interrupted."""
    out = tmp_path_factory.mktemp("crash") / "straight"
    _train(config, out)
    return out


def _assert_same_as_reference(out: Path, reference: Path) -> None:
    want, got = _final_weights(reference), _final_weights(out)
    assert want.keys() == got.keys()
    for key in want:
        assert torch.equal(want[key], got[key]), key
    assert _train_losses(out) == _train_losses(reference)


def test_killed_mid_step_resumes_bit_identical(config, reference, tmp_path):
    out = tmp_path / "run"
    # Killed after the backward pass of step 13, before its update.
    assert _train(config, out, kill_at="train_step:13") == -signal.SIGKILL
    assert _listed_checkpoints_are_complete(out) == [5, 10]
    assert ckpt.latest_checkpoint(out) == ckpt.checkpoint_dir(out, 10)

    _train(config, out, "--resume")
    _assert_same_as_reference(out, reference)


def test_killed_during_checkpoint_write_resumes_bit_identical(config, reference, tmp_path):
    out = tmp_path / "run"
    # Killed with model.safetensors and config.json of step 15 written, the rest not.
    assert _train(config, out, kill_at="checkpoint_write:15") == -signal.SIGKILL
    (partial,) = [p for p in (out / "checkpoints").iterdir() if p.name.startswith(".step_00000015")]
    assert {p.name for p in partial.iterdir()} == {ckpt.MODEL_FILE, ckpt.CONFIG_FILE}
    # The half-written checkpoint is never listed: the latest is the previous one.
    assert _listed_checkpoints_are_complete(out) == [5, 10]
    assert ckpt.latest_checkpoint(out) == ckpt.checkpoint_dir(out, 10)

    _train(config, out, "--resume")
    assert _hidden(out) == []  # the leftover was tidied on resume
    assert _listed_checkpoints_are_complete(out) == [20, 25, 30]
    _assert_same_as_reference(out, reference)


def test_killed_at_an_arbitrary_moment_resumes_bit_identical(config, reference, tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen(
        _command(config, out), env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 120
        while not ckpt.checkpoint_dir(out, 5).is_dir() and proc.poll() is None:
            assert time.monotonic() < deadline, "no checkpoint appeared"
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)  # wherever it is now (it may already be done)
    finally:
        proc.wait()
    assert _listed_checkpoints_are_complete(out)  # whatever is listed is complete

    _train(config, out, "--resume")
    _assert_same_as_reference(out, reference)


# -- the pieces, in-process ---------------------------------------------------------


def _fake_checkpoint(directory: Path, step: int) -> None:
    ckpt.save_checkpoint(
        directory, model_state={"w": torch.full((2,), float(step))}, config={"step": step}
    )


def test_leftovers_of_a_killed_run_are_tidied(tmp_path):
    root = tmp_path / "checkpoints"
    _fake_checkpoint(root / "step_00000010", 10)
    _fake_checkpoint(root / ".step_00000005.old-1a2b", 5)  # killed between the two renames
    _fake_checkpoint(root / ".step_00000010.old-3c4d", 9)  # replaced: the new one is in place
    (root / ".step_00000015.tmp-5e6f").mkdir()  # killed while writing
    (root / ".step_00000015.tmp-5e6f" / ckpt.MODEL_FILE).write_bytes(b"\0" * 10)
    _fake_checkpoint(root / ".step_00000020.del-7a8b", 20)  # killed while pruning
    (root / "notes").mkdir()  # not ours: left alone

    assert ckpt.latest_checkpoint(tmp_path) == root / "step_00000010"  # leftovers never listed
    removed = ckpt.remove_stale_temporaries(tmp_path)

    assert sorted(p.name for p in removed) == [
        ".step_00000010.old-3c4d", ".step_00000015.tmp-5e6f", ".step_00000020.del-7a8b"
    ]  # fmt: skip
    assert sorted(p.name for p in root.iterdir()) == ["notes", "step_00000005", "step_00000010"]
    assert ckpt.load_checkpoint(root / "step_00000005").config == {"step": 5}
    assert ckpt.load_checkpoint(root / "step_00000010").config == {"step": 10}


def test_a_torn_last_metrics_line_is_dropped_on_resume(tmp_path):
    from attnkit.data.tokenizers import CharTokenizer
    from attnkit.training.loop import Trainer
    from attnkit.training.runconfig import RunConfig
    from attnkit.training.tasks import TranslationTask

    pairs = number_splits(40, 0, 0, low=1, high=999, seed=0)["train"]
    run = RunConfig.from_dict(
        {
            "model": {"preset": "small", "d_model": 16, "num_heads": 2, "d_ff": 32,
                      "num_encoder_layers": 1, "num_decoder_layers": 1, "max_len": 96},
            "train": {"max_steps": 2, "max_tokens": 400, "log_every": 1, "save_every": 2},
        }
    )  # fmt: skip
    tokenizer = CharTokenizer.train([s for s, _ in pairs] + [t for _, t in pairs])

    def trainer():
        return Trainer(run, TranslationTask(run, tokenizer, pairs), tmp_path, progress=False)

    trainer().fit()
    metrics = tmp_path / "metrics.jsonl"
    good = metrics.read_text()
    metrics.write_text(good + '{"split": "train", "step": 3, "lo')  # killed mid-append
    resumed = trainer()
    assert resumed.resume() and resumed.step == 2
    assert metrics.read_text() == good
