"""Determinism: the same seed gives bit-identical weights; another seed does not."""

from __future__ import annotations

import torch

from attnkit.data.synthetic import number_splits
from attnkit.data.tokenizers import CharTokenizer
from attnkit.training.loop import Trainer
from attnkit.training.runconfig import RunConfig
from attnkit.training.tasks import TranslationTask

PAIRS = number_splits(80, 0, 0, low=1, high=999, seed=0)["train"]


def _train(tmp_path, seed: int) -> dict[str, torch.Tensor]:
    run = RunConfig.from_dict(
        {
            "model": {"preset": "small", "d_model": 32, "num_heads": 2, "d_ff": 64,
                      "num_encoder_layers": 1, "num_decoder_layers": 1, "max_len": 96},
            "train": {"max_steps": 6, "max_tokens": 400, "warmup_steps": 3, "log_every": 1,
                      "eval_every": 100, "save_every": 0, "seed": seed},
        }
    )  # fmt: skip
    texts = [s for s, _ in PAIRS] + [t for _, t in PAIRS]
    trainer = Trainer(
        run, TranslationTask(run, CharTokenizer.train(texts), PAIRS), tmp_path, progress=False
    )
    trainer.fit()  # dropout 0.1 is on: the RNG stream matters too
    return {k: v.clone() for k, v in trainer.model.state_dict().items()}


def test_same_seed_gives_bit_identical_weights_and_another_seed_does_not(tmp_path):
    first = _train(tmp_path / "a", seed=5)
    again = _train(tmp_path / "b", seed=5)
    other = _train(tmp_path / "c", seed=6)
    assert first.keys() == again.keys() == other.keys()
    for key in first:
        assert torch.equal(first[key], again[key]), key
    assert any(not torch.equal(first[key], other[key]) for key in first)
