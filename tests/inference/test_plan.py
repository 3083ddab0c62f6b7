"""The inference plan: every "how to run" choice made in ``make_plan``, installed by ``prepare``."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from attnkit.attention.backends import REFERENCE, TakesBackend
from attnkit.attention.one_query import OneQueryDecode
from attnkit.decoding import StaticCacheStepper
from attnkit.decoding.static import FROZEN_TUNED
from attnkit.errors import UsageError
from attnkit.inference import (
    CheckpointInfo,
    InferencePlan,
    Machine,
    Options,
    SearchSettings,
    make_plan,
    prepare,
)
from attnkit.models import (
    DecoderOnlyConfig,
    DecoderOnlyLM,
    EncoderDecoder,
    RNNSeq2Seq,
    RNNSeq2SeqConfig,
    TransformerConfig,
)
from attnkit.quantize import PackedLinear
from attnkit.quantize.linear import Int8Linear

CPU, GPU = Machine("cpu", 2), Machine("cuda:0", 2)  # a plan for a GPU needs none here


def transformer() -> EncoderDecoder:
    config = TransformerConfig.from_preset(
        "small", d_model=32, num_heads=4, d_ff=64, num_encoder_layers=1, num_decoder_layers=1,
        src_vocab_size=24, tgt_vocab_size=24, dropout=0.0,
    )  # fmt: skip
    torch.manual_seed(0)
    return EncoderDecoder(config).eval()


def lm() -> DecoderOnlyLM:
    config = DecoderOnlyConfig.from_preset(
        "small", d_model=32, num_heads=4, d_ff=64, num_layers=1, vocab_size=24, max_len=40
    )
    return DecoderOnlyLM(config).eval()


def seq2seq(model: torch.nn.Module) -> CheckpointInfo:
    return CheckpointInfo.of(model, "seq2seq")


def backends(model: torch.nn.Module) -> set[type]:
    return {type(m.backend) for m in model.modules() if isinstance(m, TakesBackend)}


def test_the_cpu_plan_and_how_each_choice_was_made():
    plan = make_plan(seq2seq(transformer()), CPU, Options(rows=32))  # conftest: packed fp32
    assert (plan.engine, plan.linears, plan.attention, plan.cache) == (
        "attnkit", "packed", "one-query", "model"
    )  # fmt: skip
    assert plan.search == SearchSettings(check_every=1, sync_free=True)
    assert plan.decided("linears") == "machine" and plan.decided("precision") == "default"
    line = plan.describe()
    assert "\n" not in line
    assert "linears packed (machine)" in line and "precision fp32 (default)" in line
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.precision = "int8"  # type: ignore[misc]


def test_an_accelerator_gets_the_static_cache_and_fewer_host_syncs():
    plan = make_plan(seq2seq(transformer()), GPU, Options())
    assert (plan.linears, plan.attention, plan.cache) == ("as-loaded", "reference", "static")
    assert plan.search == SearchSettings(check_every=8, sync_free=False)
    compiled = make_plan(seq2seq(transformer()), GPU, Options(path="compiled"))
    assert (compiled.cache, compiled.compile_mode) == ("compiled", "reduce-overhead")
    on_cpu = make_plan(seq2seq(transformer()), CPU, Options(path="compiled"))
    assert (on_cpu.cache, on_cpu.compile_mode, on_cpu.attention) == (
        "compiled", FROZEN_TUNED, "reference"
    )  # fmt: skip
    given = make_plan(seq2seq(transformer()), GPU, Options(check_every=3))
    assert given.search.check_every == 3 and given.decided("search") == "option"


def test_what_cannot_run_is_refused_naming_the_option():
    rnn = RNNSeq2Seq(RNNSeq2SeqConfig.from_preset("small", src_vocab_size=24, tgt_vocab_size=24))
    with pytest.raises(UsageError, match="--compile: only Transformer"):
        make_plan(seq2seq(rnn), CPU, Options(path="compiled"))
    with pytest.raises(UsageError, match="--precision int8: CPU kernels; add --device cpu"):
        make_plan(seq2seq(transformer()), GPU, Options(precision="int8"))
    # a model without a decode step has no --compile to refuse: its weights as asked
    masked = make_plan(CheckpointInfo(kind="masked_lm"), CPU, Options(path="compiled"))
    assert (masked.cache, masked.linears) == ("none", "as-loaded")


def test_compile_takes_every_cpu_precision_with_its_linears():
    info = CheckpointInfo.of(lm(), "causal_lm")
    for precision, linears in [("fp32", "as-loaded"), ("bf16", "bf16-plain"), ("int8", "int8"),
                               ("int8w", "int8w"), ("int4", "int4")]:  # fmt: skip
        plan = make_plan(info, CPU, Options(precision=precision, path="compiled"))
        assert (plan.precision, plan.linears, plan.cache, plan.compile_mode) == (
            precision, linears, "compiled", FROZEN_TUNED
        )  # fmt: skip
    smooth = make_plan(info, CPU, Options(precision="int8", path="compiled", calibrate=True))
    assert smooth.linears == "int8-smooth"
    # int4 blocks run as stored, compiled too
    blocks = CheckpointInfo(kind="causal_lm", static_cache=True, weights="int4")
    plan = make_plan(blocks, CPU, Options(path="compiled"))
    assert (plan.precision, plan.linears, plan.cache) == ("int4", "as-loaded", "compiled")
    with pytest.raises(UsageError, match="--precision int8: CPU kernels"):
        make_plan(info, GPU, Options(precision="int8", path="compiled"))


def test_int8_calibrates_a_language_model_only_when_the_command_has_its_tokenizer():
    info = CheckpointInfo.of(lm(), "causal_lm")
    assert make_plan(info, CPU, Options(precision="int8", calibrate=True)).linears == "int8-smooth"
    assert make_plan(info, CPU, Options(precision="int8")).linears == "int8"
    assert (
        make_plan(seq2seq(transformer()), CPU, Options(precision="int8", calibrate=True)).linears
        == "int8"
    )


def test_int4_calibrates_a_language_model_when_asked(monkeypatch):
    info = CheckpointInfo.of(lm(), "causal_lm")
    monkeypatch.delenv("ATTNKIT_INT4_AWQ", raising=False)  # the default: plain RTN
    assert make_plan(info, CPU, Options(precision="int4", calibrate=True)).linears == "int4"
    monkeypatch.setenv("ATTNKIT_INT4_AWQ", "1")
    assert make_plan(info, CPU, Options(precision="int4", calibrate=True)).linears == "int4-awq"
    assert make_plan(info, CPU, Options(precision="int4")).linears == "int4"


def test_prepare_installs_what_the_plan_names():
    model = transformer()
    loaded = SimpleNamespace(model=model, tokenizer=None)
    stepper = prepare(loaded, make_plan(seq2seq(model), CPU, Options()))  # type: ignore[arg-type]
    assert stepper is model  # the CPU's fast path: the model's own cache
    assert any(isinstance(m, PackedLinear) for m in model.modules())
    assert backends(model) == {OneQueryDecode}
    # the GPU's choices, installed on a CPU model: only the plan decides, not the device
    other = transformer()
    plan = make_plan(seq2seq(other), GPU, Options())
    got = prepare(SimpleNamespace(model=other, tokenizer=None), plan)  # type: ignore[arg-type]
    assert isinstance(got, StaticCacheStepper) and backends(other) == {type(REFERENCE)}
    int8 = transformer()
    prepare(SimpleNamespace(model=int8, tokenizer=None),  # type: ignore[arg-type]
            make_plan(seq2seq(int8), CPU, Options(precision="int8")))  # fmt: skip
    assert any(isinstance(m, Int8Linear) for m in int8.modules())


def test_another_engine_is_opened_by_the_opener_handed_in_and_loads_nothing_itself():
    plan = make_plan(CheckpointInfo(kind="seq2seq"), Machine("auto", 4),
                     Options(engine="ctranslate2", precision="int8"))  # fmt: skip
    assert (plan.engine, plan.device, plan.threads, plan.has_stepper) == (
        "ctranslate2", "auto", 4, False
    )  # fmt: skip
    loads: list[int] = []

    def load() -> object:
        loads.append(1)
        return "loaded"

    seen: list[InferencePlan] = []
    engine = prepare(load, plan, openers={"ctranslate2": lambda p, ld: seen.append(p) or "engine"})  # type: ignore[arg-type,misc]
    assert engine == "engine" and seen == [plan] and loads == []
    with pytest.raises(ValueError, match="no opener"):
        prepare(load, plan)  # type: ignore[arg-type]


def test_the_searches_and_steppers_never_look_at_the_device():
    decoding = Path(__file__).resolve().parents[2] / "attnkit" / "decoding"
    sniffing = re.compile(r"device\.type|\.is_cuda|_on_cpu|cuda\.is_available")
    found = [
        f"{p.name}:{n}"
        for p in sorted(decoding.glob("*.py"))
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if sniffing.search(line)
    ]
    assert not found, f"device checks in attnkit/decoding (the plan's job): {found}"
