"""``train.freeze``: embeddings, the first N layers, name patterns, for every family; frozen
weights stay as they were through training and the trainable count leaves them out."""

from __future__ import annotations

import json

import pytest
import torch

from attnkit.errors import ConfigError
from attnkit.models import build_model, config_from_preset
from attnkit.training.freeze import freeze
from attnkit.training.runconfig import RunConfig
from attnkit.training.warm_start import count_parameters

SMALL = {"d_model": 16, "num_heads": 2, "d_ff": 32}
FAMILIES = {
    "transformer": {**SMALL, "num_encoder_layers": 2, "num_decoder_layers": 2,
                    "src_vocab_size": 20, "tgt_vocab_size": 20},
    "decoder_only": {**SMALL, "num_layers": 3, "vocab_size": 20},
    "encoder_only": {**SMALL, "num_layers": 3, "vocab_size": 20, "mask_id": 19,
                     "type_vocab_size": 2, "embedding_norm": True},
    "vit": {**SMALL, "num_layers": 2},
    "rnn": {"embed_dim": 8, "hidden_size": 8, "src_vocab_size": 20, "tgt_vocab_size": 20},
}  # fmt: skip


def _model(family: str):
    preset = "digits" if family == "vit" else "small"
    return build_model(config_from_preset(family, preset, **FAMILIES[family]))


def _frozen(model) -> set[str]:
    return {n for n, p in model.named_parameters(remove_duplicate=False) if not p.requires_grad}


@pytest.mark.parametrize(
    ("family", "expected"),
    [
        # Tied output projections are the token table (frozen with it).
        ("transformer", {"src_embed.tokens.weight", "tgt_embed.tokens.weight",
                         "output_proj.weight"}),
        ("decoder_only", {"embed.tokens.weight", "embed.positions.weight", "lm_head.weight"}),
        ("encoder_only", {"embed.tokens.weight", "embed.positions.weight", "embed.norm.weight",
                          "embed.norm.bias", "token_types.weight",
                          "mlm_head.output_proj.weight"}),
        ("vit", {"patch_embed.proj.weight", "patch_embed.proj.bias", "positions.weight"}),
        ("rnn", {"src_embed.weight", "tgt_embed.weight"}),
    ],
)  # fmt: skip
def test_embeddings_of_every_family(family, expected):
    model = _model(family)
    names = freeze(model, ["embeddings"])
    assert _frozen(model) == expected
    assert expected <= set(names)


def test_tied_output_projection_freezes_with_the_token_table():
    model = _model("decoder_only")
    names = freeze(model, ["embeddings"])
    assert "lm_head.weight" in names and not model.lm_head.weight.requires_grad


def test_first_layers_of_every_stack():
    model = _model("transformer")
    freeze(model, ["layers:1"])
    frozen = _frozen(model)
    assert any(n.startswith("encoder.layers.0.") for n in frozen)
    assert any(n.startswith("decoder.layers.0.") for n in frozen)
    assert not any(n.startswith(("encoder.layers.1.", "decoder.layers.1.")) for n in frozen)
    model = _model("encoder_only")
    freeze(model, ["layers:2"])
    assert {n.split(".")[2] for n in _frozen(model)} == {"0", "1"}
    with pytest.raises(ConfigError, match="layers:1: this RNNSeq2Seq has no layer stacks"):
        freeze(_model("rnn"), ["layers:1"])


def test_patterns_name_modules_or_parameters_and_must_match():
    model = _model("encoder_only")
    freeze(model, ["encoder.layers.2", "*.ffn.w1.bias"])
    frozen = _frozen(model)
    assert {n for n in frozen if n.startswith("encoder.layers.2.")} == {
        n for n, _ in model.named_parameters() if n.startswith("encoder.layers.2.")
    }
    assert (
        "encoder.layers.0.ffn.w1.bias" in frozen and "encoder.layers.0.ffn.w1.weight" not in frozen
    )
    with pytest.raises(ConfigError, match=r"train.freeze: 'encoder.layer.0' matches no parameter"):
        freeze(model, ["encoder.layer.0"])


def test_the_config_checks_the_syntax():
    with pytest.raises(ConfigError, match=r"train.freeze: 'layers:x': expected layers:N"):
        RunConfig.from_dict({"train": {"freeze": ["layers:x"]}})
    run = RunConfig.from_dict({"train": {"freeze": ["embeddings", "layers:2"]}})
    assert run.train.freeze == ("embeddings", "layers:2")


def test_frozen_weights_do_not_move_and_the_trainable_count_leaves_them_out(tmp_path, capsys):
    from attnkit import checkpoints as ckpt
    from attnkit.cli.main import main

    text = "the cat sat on the mat. the dog sat on the log. " * 20
    (tmp_path / "t.txt").write_text(text, encoding="utf-8")
    config = tmp_path / "c.yaml"
    config.write_text(
        f"task: lm\ndata: {{dir: {tmp_path}, text: t.txt}}\ntokenizer: {{kind: char}}\n"
        "model: {d_model: 32, num_heads: 2, d_ff: 64, num_layers: 2, max_len: 16, dropout: 0.0}\n"
        "train: {max_steps: 1, max_tokens: 64, schedule: constant, lr: 0.01, warmup_steps: 0,\n"
        "        eval_every: 100, eval_blocks: 1, save_every: 0}\n"
    )
    base = tmp_path / "base"
    assert main(["train", "--config", str(config), "--out", str(base), "--no-progress"]) == 0
    capsys.readouterr()
    out = tmp_path / "frozen"
    argv = ["train", "--config", str(config), "--out", str(out), "--no-progress",
            "--init", str(base), "--set", "train.max_steps=3",
            "--set", "train.freeze=[embeddings, layers:1]"]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    before = ckpt.load_checkpoint(ckpt.latest_checkpoint(base)).model_state
    after = ckpt.load_checkpoint(ckpt.latest_checkpoint(out)).model_state
    moved = {n for n in before if not torch.equal(before[n], after[n])}
    assert moved and not any(n.startswith(("embed.", "layers.0.", "lm_head.")) for n in moved)
    assert any(n.startswith("layers.1.") for n in moved)
    model = _model("decoder_only")  # the count the CLI prints follows requires_grad
    summary = json.loads(printed.strip().splitlines()[-1])
    assert summary["trainable_parameters"] < summary["parameters"]
    assert f"({summary['trainable_parameters'] / 1e6:.2f}M trainable)" in printed
    freeze(model, ["embeddings"])
    trainable, total = count_parameters(model)
    assert trainable == total - sum(p.numel() for n, p in model.named_parameters()
                                    if n.startswith("embed."))  # fmt: skip
