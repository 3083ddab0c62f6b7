"""Session fixtures of the reliability tests: one tiny trained run, one decoder-only checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from reliability_helpers import TrainedRun, cli, lines, write_config, write_corpus, write_lines

from attnkit import checkpoints as ckpt
from attnkit.data.tokenizers import CharTokenizer
from attnkit.models.decoder_only import DecoderOnlyLM
from attnkit.models.lm_config import DecoderOnlyConfig


@pytest.fixture(scope="session")
def trained(tmp_path_factory) -> TrainedRun:
    """One tiny translation run through the real CLI, shared by every reliability test.

    Its training data is deliberately untidy: ``train.en`` has CRLF line
    endings, ``train.de`` starts with a UTF-8 BOM, one pair is longer than
    ``data.max_len`` and one pair has an empty target with ``data.skip_empty``.
    """
    root = tmp_path_factory.mktemp("reliability")
    data = write_corpus(root / "data")
    src, tgt = lines("train", 0), lines("train", 1)
    src = [*src, "nine hundred ninety-nine " * 6, "seven"]  # too long; empty target
    tgt = [*tgt, "neunhundertneunundneunzig " * 6, ""]
    write_lines(data / "train.en", src, newline="\r\n")
    write_lines(data / "train.de", tgt, bom=True)
    config = write_config(root / "tiny.yaml", data, max_len=64, skip_empty=True, max_steps=2)
    run = root / "run"
    result = cli("train", "--config", str(config), "--out", str(run), "--no-progress", cwd=root)
    assert result.returncode == 0, result.stderr
    (checkpoint,) = sorted((run / "checkpoints").glob("step_*"))
    return TrainedRun(root, data, run, checkpoint, result.stdout, result.stderr)


@pytest.fixture(scope="session")
def lm_checkpoint(tmp_path_factory) -> Path:
    """A checkpoint of a tiny random decoder-only (GPT-style) model, with optimizer and
    trainer state (so every file a loader might open is there)."""
    text = "to be or not to be, that is the question\n"
    torch.manual_seed(0)
    tok = CharTokenizer.train([text])
    config = DecoderOnlyConfig.from_preset(
        "small", d_model=32, num_heads=2, d_ff=64, num_layers=1, max_len=16,
        vocab_size=tok.vocab_size, dropout=0.0,
    )  # fmt: skip
    model = DecoderOnlyLM(config)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.tensor([tok.encode(text)[:8]])).logits.sum().backward()
    optimizer.step()
    directory = tmp_path_factory.mktemp("lm") / "checkpoint"
    ckpt.save_checkpoint(
        directory,
        model_state=model.state_dict(),
        config=config.to_dict(),
        tokenizer_json=tok.to_json(),
        trainer_state={"step": 1, "rng": torch.get_rng_state()},
        optimizer_state=optimizer.state_dict(),
    )
    return directory
