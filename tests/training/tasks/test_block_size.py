"""data.block_size: the LM tasks train on blocks shorter than the model's context."""

from __future__ import annotations

import pytest

from attnkit.data.lm import load_lm_corpus
from attnkit.data.tokenizers import CharTokenizer
from attnkit.errors import ConfigError
from attnkit.training.runconfig import RunConfig
from attnkit.training.tasks import CausalLMTask


def test_block_size_cuts_lm_blocks_below_the_context(tmp_path):

    (tmp_path / "t.txt").write_text("to be or not to be " * 40, encoding="utf-8")
    base = {"task": "lm", "data": {"dir": str(tmp_path), "text": "t.txt", "block_size": 16},
            "model": {"preset": "small", "d_model": 32, "num_heads": 2, "d_ff": 64,
                      "num_layers": 1, "max_len": 64}, "train": {"max_tokens": 64}}  # fmt: skip
    run = RunConfig.from_dict(base)
    task = CausalLMTask(
        run, load_lm_corpus(tmp_path / "t.txt", CharTokenizer.train(["to be or n"]))
    )
    (x, y), _ = task.next_batch()
    assert x.shape == (4, 16) and task.model_config.max_len == 64
    with pytest.raises(ConfigError, match=r"data.block_size: 65 is longer than the model's"):
        base["data"]["block_size"] = 65
        CausalLMTask(RunConfig.from_dict(base), task.corpus)
