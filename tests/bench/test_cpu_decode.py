"""``bench/cpu_decode.py`` helpers: the CT2-friendly vocabulary and model, agreement, options."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import cpu_decode  # noqa: E402  (bench/ is not a package)
import engines  # noqa: E402


def test_vocabulary_puts_pad_last():
    vocab = engines.vocabulary(10)
    assert len(vocab) == 10 and vocab[-1] == "<pad>" and vocab[:3] == ["<unk>", "<s>", "</s>"]


def test_model_has_zero_start_row_and_pad_last():
    model = engines.build_model(40, preset="small")
    assert model.pad_id == 39 and model.bos_id == engines.BOS
    assert model.tgt_embed.tokens.weight[engines.BOS].abs().sum() == 0
    src = engines.random_source(3, 5, 40)
    assert src.min() >= 3 and src.max() < 39


def test_agreement_counts_sentences_and_tokens():
    same, tokens = cpu_decode.agreement([[1, 2, 3], [4, 5]], [[1, 2, 3], [4, 6]])
    assert same == 0.5 and tokens == pytest.approx(4 / 5)


def test_options():
    args = cpu_decode.parse_args(["--engines", "attnkit_int8,ct2_int8", "--threads", "1"])
    assert args.engines == "attnkit_int8,ct2_int8" and args.threads == 1 and args.rounds == 3


def test_every_attnkit_engine_decodes_the_same_model():
    model = engines.build_model(40, preset="small")
    src = engines.random_source(2, 5, 40)
    outs = {}
    for name in [e for e in cpu_decode.ALL_ENGINES + cpu_decode.OTHER_ENGINES
                 if e.startswith("attnkit") and e != "attnkit_compiled"]:  # fmt: skip
        run = cpu_decode.attnkit_runner(cpu_decode.attnkit_stepper(name, model), src, 2, 6)
        outs[name] = run()
        assert [len(t) for t in outs[name]] == [6, 6]  # forced to the length asked for
    assert outs["attnkit_fp32"] == outs["attnkit_reference"] == outs["attnkit_static"]
    assert type(model.decoder.layers[0].cross_attn.q_proj) is nn.Linear  # quantised copies only
