"""A model whose positions cannot hold the longest training pair is refused up front."""

from __future__ import annotations

import pytest

from attnkit.data.tokenizers import CharTokenizer
from attnkit.errors import ConfigError
from attnkit.training.loop import Trainer
from attnkit.training.runconfig import RunConfig
from attnkit.training.tasks import TranslationTask

PAIRS = [("ab" * 10, "cd" * 12), ("abc", "dc")]  # longest: 21 source, 25 target tokens


def _trainer(tmp_path, model: dict) -> Trainer:
    run = RunConfig.from_dict({"model": model, "train": {"max_steps": 1, "max_tokens": 200}})
    texts = [s for s, _ in PAIRS] + [t for _, t in PAIRS]
    return Trainer(
        run, TranslationTask(run, CharTokenizer.train(texts), PAIRS), tmp_path, progress=False
    )


TINY = {"preset": "small", "d_model": 16, "num_heads": 2, "d_ff": 32,
        "num_encoder_layers": 1, "num_decoder_layers": 1}  # fmt: skip


def test_transformer_positions_must_hold_the_longest_pair(tmp_path):
    with pytest.raises(ConfigError, match=r"model\.max_len: 24 positions, .* needs 25"):
        _trainer(tmp_path, {**TINY, "max_len": 24})
    assert _trainer(tmp_path, {**TINY, "max_len": 25}).task.model_config.max_len == 25


def test_location_score_must_cover_the_longest_source(tmp_path):
    rnn = {"family": "rnn", "preset": "small", "attention": "luong_location",
           "input_feeding": True, "max_len": 64}  # fmt: skip
    with pytest.raises(ConfigError, match=r"model\.max_src_len: 20 positions, .* needs 21"):
        _trainer(tmp_path, {**rnn, "max_src_len": 20})
    assert _trainer(tmp_path, {**rnn, "max_src_len": 21}).task.model_config.max_src_len == 21
