"""``--compile auto``: the compiled decode step only where it is the faster here, timed once.

The timings run dynamo with a counting backend (``CompileCounter``: the graph runs
as captured, no inductor), so these are fast; the compiled step against inductor
is ``tests/decoding/test_compiled_precisions.py``'s.
"""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.testing import CompileCounter

from attnkit.cli.inference_args import decode_path
from attnkit.cli.main import build_parser
from attnkit.errors import UsageError
from attnkit.inference import CheckpointInfo, Machine, Options, compile_choice, make_plan
from attnkit.models import DecoderOnlyConfig, DecoderOnlyLM, RNNSeq2Seq, RNNSeq2SeqConfig
from attnkit.quantize.linear import Int8Linear


@pytest.fixture(autouse=True)
def _measured(monkeypatch, fresh_dynamo):
    monkeypatch.delenv(compile_choice.ENV, raising=False)


@pytest.fixture
def counting(monkeypatch):
    """``torch.compile`` with a counting backend; returns the counter."""
    counter, real = CompileCounter(), torch.compile

    def compile_(fn, **kwargs):
        return real(fn, backend=counter, fullgraph=True, dynamic=False)

    monkeypatch.setattr(torch, "compile", compile_)
    return counter


def llama(max_len: int = 64) -> DecoderOnlyLM:
    config = DecoderOnlyConfig.from_preset(
        "small", d_model=32, num_heads=4, num_kv_heads=2, d_ff=64, num_layers=1,
        vocab_size=48, max_len=max_len, dropout=0.0, norm="rmsnorm", activation="swiglu",
        positions="rotary",
    )  # fmt: skip
    torch.manual_seed(0)
    return DecoderOnlyLM(config).eval()


def plans(model, precision: str = "fp32"):
    info, machine = CheckpointInfo.of(model, "causal_lm"), Machine("cpu", 2)
    made = {p: make_plan(info, machine, Options(precision=precision, path=p, rows=1))
            for p in ("fast", "compiled")}  # fmt: skip
    return made["fast"], made["compiled"]


def test_a_timing_runs_each_plan_on_a_copy_and_compiles_one_graph(counting):
    model = llama()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    eager, compiled = plans(model, "int8")
    seconds, failed = compile_choice.step_time(model, compiled)
    assert seconds > 0 and not failed
    assert counting.frame_count == 1  # the one-token step; the prompt ran eagerly
    assert not any(isinstance(m, Int8Linear) for m in model.modules())  # converted a copy
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())  # untouched
    assert compile_choice.step_time(model, eager)[0] > 0


def test_the_timing_sizes_the_cache_as_the_run_will(monkeypatch, counting):
    """With the run's prompt + new tokens, the timed step's static cache has the run's
    capacity bucket, so the run reuses the programs the timing compiled."""
    from attnkit.decoding.static import StaticKVCache

    capacities = []
    real = StaticKVCache.allocate

    def allocate(*args, capacity, **kwargs):
        capacities.append(capacity)
        return real(*args, capacity=capacity, **kwargs)

    monkeypatch.setattr(StaticKVCache, "allocate", allocate)
    model = llama(max_len=512)
    _, compiled = plans(model)
    compile_choice.step_time(model, compiled)
    compile_choice.step_time(model, compiled, positions=30 + 256)
    assert set(capacities) == {64, 512}  # 8 + 33 -> 64; 286 -> 512, as the run's


def test_choose_measures_once_then_reads_the_cache(tmp_path, monkeypatch, counting):
    model = llama()
    eager, compiled = plans(model)
    times = {"fast": 2.0, "compiled": 1.0}
    calls = []

    def fake(m, plan, positions=None):
        calls.append(plan.path)
        return times[plan.path], False

    monkeypatch.setattr(compile_choice, "step_time", fake)
    first = compile_choice.choose(model, eager, compiled, root=tmp_path)
    assert first.compiled and first.speedup == pytest.approx(2.0)
    assert calls == ["fast", "compiled"] and "measured in" in first.describe()
    again = compile_choice.choose(model, eager, compiled, root=tmp_path)
    assert again.compiled and again.speedup is None and len(calls) == 2
    slower = llama().double()  # parameters of another dtype: another key, measured anew
    times["compiled"] = 3.0
    assert not compile_choice.choose(slower, *plans(slower), root=tmp_path).compiled
    assert len(calls) == 4


def test_a_choice_is_kept_if_the_machine_was_quiet_when_the_timing_began(tmp_path, monkeypatch):
    from attnkit.kernels import machine_choice

    model = llama()
    loads = iter([False, True])  # quiet before the timing, "busy" after (its own compile)
    monkeypatch.setattr(machine_choice, "machine_busy", lambda: next(loads))
    monkeypatch.setattr(compile_choice, "step_time", lambda m, plan, positions: (1.0, False))
    compile_choice.choose(model, *plans(model), root=tmp_path)
    monkeypatch.setattr(compile_choice, "measure", lambda *a: pytest.fail("measured again"))
    assert compile_choice.choose(model, *plans(model), root=tmp_path).speedup is None


def test_a_step_that_does_not_compile_counts_as_eager(tmp_path, monkeypatch):
    def broken(fn, **kwargs):
        def fails(*args, **kw):
            raise RuntimeError("no compiler here")

        return fails

    monkeypatch.setattr(torch, "compile", broken)
    model = llama()
    eager, compiled = plans(model)
    assert compile_choice.step_time(model, compiled)[1]  # fell back
    choice = compile_choice.choose(model, eager, compiled, root=tmp_path)
    assert not choice.compiled


def test_the_environment_decides_without_a_timing(monkeypatch):
    monkeypatch.setattr(compile_choice, "measure", lambda *a: pytest.fail("measured"))
    model = llama()
    for forced, compiled in (("compiled", True), ("eager", False)):
        monkeypatch.setenv(compile_choice.ENV, forced)
        assert compile_choice.choose(model, *plans(model)).compiled is compiled
    monkeypatch.setenv(compile_choice.ENV, "sometimes")
    with pytest.raises(UsageError, match="ATTNKIT_COMPILE"):
        compile_choice.choose(model, *plans(model))


def test_the_plan_takes_the_faster_step_and_says_so(monkeypatch):
    model = llama()
    info, machine = CheckpointInfo.of(model, "causal_lm"), Machine("cpu", 2)
    monkeypatch.setenv(compile_choice.ENV, "compiled")
    plan = make_plan(info, machine, Options(precision="int8", path="auto", rows=1))
    assert (plan.path, plan.cache, plan.attention) == ("compiled", "compiled", "reference")
    assert plan.decided("cache") == "machine" and "--compile auto: compiled" in plan.describe()
    monkeypatch.setenv(compile_choice.ENV, "eager")
    plan = make_plan(info, machine, Options(precision="int8", path="auto", rows=1))
    assert (plan.path, plan.cache, plan.attention) == ("fast", "model", "one-query")
    assert "--compile auto: eager" in plan.describe()
    rnn = RNNSeq2Seq(RNNSeq2SeqConfig.from_preset("small", src_vocab_size=24, tgt_vocab_size=24))
    monkeypatch.setattr(compile_choice, "choose", lambda *a: pytest.fail("no static step"))
    plain = make_plan(CheckpointInfo.of(rnn, "seq2seq"), machine, Options(path="auto"))
    assert plain.path == "fast"


@pytest.mark.parametrize("command", ["generate", "translate"])
def test_compile_on_the_command_line(command, capsys):
    parser = build_parser()
    given = {(): "fast", ("--compile",): "compiled", ("--compile", "auto"): "auto",
             ("--compile=on",): "compiled"}  # fmt: skip
    for extra, path in given.items():
        args = parser.parse_args([command, "--checkpoint", "ck", *extra])
        assert decode_path(args) == path
    with pytest.raises(SystemExit):
        parser.parse_args([command, "--checkpoint", "ck", "--compile", "sometimes"])
    assert "invalid choice" in capsys.readouterr().err
