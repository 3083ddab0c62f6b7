"""The LM training loop lowers the loss on a tiny text and writes a usable checkpoint."""

from __future__ import annotations

import json

import torch

from attnkit.data.lm import load_lm_corpus
from attnkit.models.decoder_only import DecoderOnlyLM
from attnkit.models.lm_config import DecoderOnlyConfig
from attnkit.training.lm_task import LMTrainConfig, train_lm
from attnkit.training.loading import load_decoder_only

TEXT = "abcdefgh" * 80  # the validation split (last 10%) continues the pattern


def test_train_lm_lowers_the_loss_and_saves_a_checkpoint(tmp_path):
    path = tmp_path / "input.txt"
    path.write_text(TEXT, encoding="utf-8")
    corpus = load_lm_corpus(path)
    config = DecoderOnlyConfig.from_preset(
        "small", d_model=32, num_heads=2, d_ff=64, num_layers=1, max_len=16,
        vocab_size=corpus.tokenizer.vocab_size, dropout=0.0,
    )  # fmt: skip
    model = DecoderOnlyLM(config)
    cfg = LMTrainConfig(batch_size=16, max_steps=60, lr=3e-3, warmup_steps=5, log_every=10,
                        eval_every=30, eval_blocks=8, save_every=30)  # fmt: skip
    result = train_lm(model, corpus, tmp_path / "run", cfg, device="cpu", progress=False)

    records = [
        json.loads(r) for r in (tmp_path / "run" / "metrics.jsonl").read_text().split("\n")[:-1]
    ]
    train = [r["loss"] for r in records if r["split"] == "train"]
    valid = [r for r in records if r["split"] == "valid"]
    assert len(train) == 6 and train[-1] < 0.5 * train[0]
    assert [r["step"] for r in valid] == [30, 60] and valid[-1]["loss"] < 1.0
    assert result["step"] == 60 and result["valid"]["loss"] == valid[-1]["loss"]

    steps = sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir())
    assert steps == ["step_00000030", "step_00000060"]
    loaded, tok = load_decoder_only(tmp_path / "run", "cpu")  # the latest checkpoint
    assert loaded.config == config and not loaded.training
    x = corpus.train[:16][None]
    model.eval()
    torch.testing.assert_close(loaded(x).logits, model(x).logits)
    assert tok.to_json() == corpus.tokenizer.to_json()


def _tiny_lm_run(tmp_path, fast: str) -> dict[str, torch.Tensor]:
    tmp_path.mkdir()
    path = tmp_path / "input.txt"
    path.write_text(TEXT, encoding="utf-8")
    corpus = load_lm_corpus(path)
    torch.manual_seed(0)
    config = DecoderOnlyConfig.from_preset(
        "small", d_model=32, num_heads=2, d_ff=64, num_layers=1, max_len=16,
        vocab_size=corpus.tokenizer.vocab_size, dropout=0.0,
    )  # fmt: skip
    model = DecoderOnlyLM(config)
    cfg = LMTrainConfig(batch_size=8, max_steps=5, warmup_steps=2, eval_every=100,
                        fast=fast)  # fmt: skip
    train_lm(model, corpus, tmp_path / "run", cfg, device="cpu", progress=False)
    return model.state_dict()


def test_fast_lm_step_goes_through_torch_compile_and_matches_the_plain_step(tmp_path, monkeypatch):
    compiled = []

    def recording_compile(fn, *args, **kwargs):  # compile itself: tests/training/test_fast_paths
        compiled.append(fn.__name__)
        return fn

    monkeypatch.setattr(torch, "compile", recording_compile)
    plain = _tiny_lm_run(tmp_path / "plain", "off")
    assert compiled == []
    fast = _tiny_lm_run(tmp_path / "fast", "on")
    assert compiled == ["causal_lm_loss"]
    for name in plain:
        torch.testing.assert_close(fast[name], plain[name], rtol=1e-5, atol=1e-6, msg=name)
