"""A compiled decode step (``--compile``) with the precision's linears inside it, against
the same model's eager step on the same static cache.

Each compiled case compiles a one-layer Llama-type LM with inductor's C++ wrapper
and frozen weights (the CPU plan's ``FROZEN_TUNED`` mode: its GEMM templates timed at
compile time): tens of seconds on 2 cores, so they are slow. ``fullgraph`` is on and a
fallback warning is an error, so a case passes only if the whole step compiled as one graph.
"""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from torch import Tensor

from attnkit.decoding import StaticCacheStepper
from attnkit.decoding.static import FROZEN_TUNED
from attnkit.inference import CheckpointInfo, Machine, Options, make_plan
from attnkit.inference.prepare import convert, stepper
from attnkit.kernels import torch_ops
from attnkit.models import DecoderOnlyConfig, DecoderOnlyLM
from attnkit.quantize import Int4Linear, Int8WeightOnlyLinear
from attnkit.quantize.linear import Bf16Linear, Int8Linear

STEPS = 8
# max |compiled - eager| / max |eager| over a step's logits. fp32: inductor sums in
# another order. The others round activations (int8: one scale per call; bf16, int8w,
# int4: to bf16) after ops inductor fuses, so a last-bit change of an input can move
# one rounding step.
TOLERANCE = {"fp32": 1e-4, "bf16": 2e-2, "int8": 2e-2, "int8w": 2e-2, "int4": 2e-2}
LINEAR = {"fp32": torch.nn.Linear, "bf16": Bf16Linear, "int8": Int8Linear,
          "int8w": Int8WeightOnlyLinear, "int4": Int4Linear}  # fmt: skip


def llama() -> DecoderOnlyLM:
    """One Llama-type layer (RMSNorm, SwiGLU, rotary, grouped keys), widths the int4
    kernel takes (outputs a multiple of 16, inputs of 32)."""
    config = DecoderOnlyConfig.from_preset(
        "small", d_model=64, num_heads=4, num_kv_heads=2, d_ff=128, num_layers=1,
        vocab_size=128, max_len=64, dropout=0.0, norm="rmsnorm", activation="swiglu",
        positions="rotary",
    )  # fmt: skip
    torch.manual_seed(0)
    return DecoderOnlyLM(config).eval()


def greedy_logits(step: StaticCacheStepper, prompt: Tensor, feed: list[int] | None) -> list[Tensor]:
    """Each step's logits ``(1, V)``, feeding ``feed`` (or the step's own argmax)."""
    state = step.start(prompt, max_steps=STEPS)
    token, out = prompt[:, -1], []
    for i in range(STEPS):
        logits, state = step.step(token, state)
        out.append(logits.clone())
        token = logits.argmax(-1) if feed is None else torch.tensor([feed[i]])
    return out


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "int8", "int4"])
def test_the_compiled_step_gives_the_eager_logits_and_tokens(precision, fresh_dynamo):
    model = llama()
    plan = make_plan(CheckpointInfo.of(model, "causal_lm"), Machine("cpu", 2),
                     Options(precision=precision, path="compiled"))  # fmt: skip
    assert plan.compile_mode == FROZEN_TUNED
    compiled = stepper(convert(model, plan), plan)
    assert isinstance(compiled, StaticCacheStepper) and compiled.compile
    assert any(type(m) is LINEAR[precision] for m in model.modules())
    eager = StaticCacheStepper(model)  # the same converted model, the same static cache
    prompt = torch.randint(3, 128, (1, 6), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = greedy_logits(eager, prompt, None)
        tokens = [int(x.argmax(-1)) for x in want]
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message=".*compiled decode step")  # no fallback
            got = greedy_logits(compiled, prompt, None)
    assert [int(x.argmax(-1)) for x in got] == tokens
    for w, g in zip(want, got):
        assert (g - w).abs().max() <= TOLERANCE[precision] * w.abs().max()


def test_the_int8_op_a_compiled_step_calls_is_the_eager_product():
    # the custom op (what a compiled step calls) finds the packed weight by its handle
    torch.manual_seed(0)
    linear = Int8Linear(torch.randn(32, 48), torch.randn(32))
    x = torch.randn(3, 48)
    packed = linear._packed
    via_op = torch.ops.attnkit.fbgemm_linear_dynamic(x, packed.handle, 32, "none")
    assert torch.equal(via_op, linear(x))
    twin = copy.deepcopy(linear)  # a copy registers its own weight
    assert twin._packed.handle != packed.handle and torch.equal(twin(x), linear(x))
    handle = packed.handle
    del linear, packed
    with pytest.raises(RuntimeError, match="no longer alive"):
        torch.ops.attnkit.fbgemm_linear_dynamic(x, handle, 32, "none")
    torch.library.opcheck(
        torch.ops.attnkit.fbgemm_linear_dynamic.default,
        (x, twin._packed.handle, 32, "relu"),
        test_utils=("test_schema", "test_faketensor"),
    )
    assert isinstance(twin._packed, torch_ops.KernelWeight)


def test_bf16_for_a_compiled_step_is_plain_bf16_linears():
    model = llama()
    plan = make_plan(CheckpointInfo.of(model, "causal_lm"), Machine("cpu", 2),
                     Options(precision="bf16", path="compiled"))  # fmt: skip
    reference = copy.deepcopy(model)
    convert(model, plan)
    assert any(isinstance(m, Bf16Linear) for m in model.modules())
    ids = torch.randint(3, 128, (2, 5), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        want, got = reference(ids).logits, model(ids).logits
    assert (got - want).abs().max() <= 0.05 * want.abs().max()
