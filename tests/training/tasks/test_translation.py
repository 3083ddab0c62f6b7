"""The translation task: which loss each model family gets under ``train.fast``."""

from __future__ import annotations

import pytest

import attnkit.training.tasks.translation as translation
from attnkit.data.synthetic import number_splits
from attnkit.data.tokenizers import CharTokenizer
from attnkit.training.loop import Trainer
from attnkit.training.runconfig import RunConfig
from attnkit.training.tasks import TranslationTask

PAIRS = number_splits(40, 0, 0, low=1, high=99, seed=0)["train"]
MODELS = {
    "transformer": {"preset": "small", "d_model": 16, "num_heads": 2, "d_ff": 32,
                    "num_encoder_layers": 1, "num_decoder_layers": 1, "max_len": 64},
    "rnn": {"family": "rnn", "preset": "small", "embed_dim": 16, "hidden_size": 16,
            "max_len": 64, "max_src_len": 64},
}  # fmt: skip


@pytest.mark.parametrize(("family", "chunked"), [("transformer", True), ("rnn", False)])
def test_the_chunked_loss_goes_to_models_whose_logits_are_one_projection(
    tmp_path, monkeypatch, family, chunked
):
    calls = []
    real = translation.chunked_label_smoothed_cross_entropy

    def spy(*args, **kwargs):
        calls.append(args[1])  # the weight the hidden states are projected with
        return real(*args, **kwargs)

    monkeypatch.setattr(translation, "chunked_label_smoothed_cross_entropy", spy)
    run = RunConfig.from_dict(
        {"model": MODELS[family],
         "train": {"max_tokens": 200, "fast": "on", "compile": False, "max_steps": 1}}
    )  # fmt: skip
    texts = [s for s, _ in PAIRS] + [t for _, t in PAIRS]
    trainer = Trainer(run, TranslationTask(run, CharTokenizer.train(texts), PAIRS), tmp_path,
                      progress=False)  # fmt: skip
    trainer.compiled = False  # eager: the choice of loss is what is checked here
    stats = trainer.train_step()
    assert stats["loss"] > 0
    assert len(calls) == int(chunked)
    if chunked:  # the model's own output projection, whatever module holds it now
        assert calls[0] is trainer.model.output_proj.weight
