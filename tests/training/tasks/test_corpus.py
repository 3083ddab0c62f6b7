"""Loading a task's text as the run config says: prepared (memory-mapped) == in memory,
streaming resumes exactly, ``tokenizer.path`` is reused, misplaced keys are refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from attnkit.data.synthetic import number_splits
from attnkit.data.token_store import TokenPairs
from attnkit.errors import ConfigError
from attnkit.training.loop import Trainer
from attnkit.training.runconfig import RunConfig
from attnkit.training.tasks import task_from_run
from attnkit.training.tasks.base import TaskContext

MODEL = {"preset": "small", "d_model": 32, "num_heads": 2, "d_ff": 64,
         "num_encoder_layers": 1, "num_decoder_layers": 1, "max_len": 96}  # fmt: skip


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("numbers")
    for split, pairs in number_splits(150, 10, 0, low=1, high=9999, seed=0).items():
        (root / f"{split}.en").write_text("".join(s + "\n" for s, _ in pairs))
        (root / f"{split}.de").write_text("".join(t + "\n" for _, t in pairs))
    (root / "text.txt").write_text("To be, or not to be, that is the question.\n" * 60)
    return root


def run_config(data_dir: Path, tmp_path: Path, **data) -> RunConfig:
    return RunConfig.from_dict({
        "data": {"dir": str(data_dir), "src_lang": "en", "tgt_lang": "de", "max_len": 80,
                 "cache_dir": str(tmp_path / "cache"), **data},
        "tokenizer": {"kind": "bpe", "vocab_size": 120},
        "model": MODEL,
        "train": {"max_tokens": 400, "warmup_steps": 2, "log_every": 1, "eval_every": 100,
                  "save_every": 4, "valid_bleu_sentences": 0, "seed": 5},
    })  # fmt: skip


def batches(task, n: int) -> list:
    task.setup(TaskContext())
    return [task.next_batch()[0] for _ in range(n)]


def test_memory_mapped_batches_equal_in_memory_batches(data_dir, tmp_path) -> None:
    said: list[str] = []
    mapped = task_from_run(run_config(data_dir, tmp_path), log=said.append)
    assert isinstance(mapped.data.pairs, TokenPairs)
    assert not mapped.data.pairs.src.ids.flags.writeable  # a read-only map of the file
    assert any("preparing" in s for s in said)
    memory = task_from_run(run_config(data_dir, tmp_path, loading="memory"))
    assert mapped.tokenizer.to_json() == memory.tokenizer.to_json()
    assert mapped.describe() == memory.describe()
    for a, b in zip(batches(mapped, 30), batches(memory, 30), strict=True):  # past an epoch
        assert torch.equal(a.src, b.src) and torch.equal(a.tgt_out, b.tgt_out)
    assert mapped.state_dict()["epoch"] >= 1
    # The second run reuses both stages.
    said.clear()
    task_from_run(run_config(data_dir, tmp_path), log=said.append)
    assert len(said) == 2 and all(s.startswith("reusing") for s in said)


def test_lm_blocks_from_the_prepared_stream_equal_in_memory(data_dir, tmp_path) -> None:
    def lm(loading: str):
        run = RunConfig.from_dict({
            "task": "lm", "data": {"dir": str(data_dir), "text": "text.txt", "loading": loading,
                                   "cache_dir": str(tmp_path / "cache")},
            "tokenizer": {"kind": "char"},
            "model": {"preset": "small", "d_model": 16, "num_heads": 2, "d_ff": 32,
                      "num_layers": 1, "max_len": 16},
            "train": {"max_tokens": 64},
        })  # fmt: skip
        return task_from_run(run)

    mapped, memory = lm("prepared"), lm("memory")
    for (xa, ya), (xb, yb) in zip(batches(mapped, 5), batches(memory, 5), strict=True):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)


def _weights(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in trainer.model.state_dict().items()}


def test_streaming_training_resumes_bit_identical(data_dir, tmp_path) -> None:
    def trainer(out: Path, steps: int) -> Trainer:
        run = run_config(data_dir, tmp_path, loading="streaming", shuffle_buffer=40)
        run.train.max_steps = steps
        return Trainer(run, task_from_run(run), out, progress=False)

    straight = trainer(tmp_path / "a", 7)
    straight.fit()
    trainer(tmp_path / "b", 5).fit()  # its last checkpoint: step 5, mid-window
    resumed = trainer(tmp_path / "b", 7)
    assert resumed.resume() and resumed.step == 5
    resumed.fit()
    a, b = _weights(straight), _weights(resumed)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert straight.task.state_dict()["window"] >= 1  # windows of 64 pairs were crossed


def test_weighted_corpora_through_the_config(data_dir, tmp_path) -> None:
    corpora = [{"dir": str(data_dir), "weight": 3}, {"dir": str(data_dir), "weight": 1}]
    for loading in ("streaming", "prepared", "memory"):
        task = task_from_run(run_config(data_dir, tmp_path, loading=loading, corpora=corpora))
        assert "shares 0.75, 0.25" in task.describe(), loading
    with pytest.raises(ConfigError, match=r"data.corpora\[1\].weight: must be > 0"):
        run_config(data_dir, tmp_path, corpora=[{"dir": "a"}, {"dir": "b", "weight": 0}])


def test_tokenizer_path_reuses_a_users_vocabulary(data_dir, tmp_path) -> None:
    first = task_from_run(run_config(data_dir, tmp_path))
    first.tokenizer.save(tmp_path / "mine.json")
    config = run_config(data_dir, tmp_path).to_dict()
    config["tokenizer"] = {"path": str(tmp_path / "mine.json")}
    reused = task_from_run(RunConfig.from_dict(config))
    assert reused.tokenizer.to_json() == first.tokenizer.to_json()
