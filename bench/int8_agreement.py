"""Issue 25: how far each CPU precision's logits are from fp32 on a Llama-type model.

    python bench/int8_agreement.py --checkpoint runs/smollm2     # attnkit import --from gguf

fp32 generates ``--new-tokens`` greedy tokens after ``bench/cpu_generate.py``'s
prompt. Each variant then (a) generates freely (tokens equal to fp32's, and
where the first differs) and (b) reads fp32's tokens teacher-forced, so one
early near-tie does not decide the rest: top-1 agreement with fp32 at every
position, and the relative error of the logits (``max|l - l_fp32| /
max|l_fp32|`` per position, median and max). fp32's smallest top-1/top-2
margins are printed too: a variant whose error exceeds a margin can flip it.

Variants: what ``quantize_model`` makes (``bf16``, ``int8w``, ``int8``: fbgemm,
activations quantised per call, per tensor; ``int8_smooth``: the same after
SmoothQuant calibrated on attnkit's built-in text, what ``--precision int8``
does for a language model) and two probes that are not
attnkit precisions (``RowInt8Linear`` below): ``int8_rows``, every linear with
a symmetric int8 scale per activation row (per token) through ``torch._int_mm``;
``int8_rows_fp32_down``, the same with the FFN's ``down_proj`` left fp32; and
``int8_rows_smooth``, SmoothQuant (Xiao et al., 2023, alpha 0.5): each input
channel ``j`` of a linear divided by ``s_j = sqrt(max|x_j| / max|W_:,j|)`` and
its weight column multiplied by it before quantizing, the maxima of ``x``
taken from fp32 runs on ``CALIBRATION`` (other prompts than the measured one).
Accuracy only, no timing: one thread, any machine load.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable, Sequence

import torch
from common import cpu_name, environment, format_table
from cpu_generate import PROMPT
from torch import Tensor, nn

from attnkit.checkpoints import load_model
from attnkit.inference import stepper_for
from attnkit.quantize import quantize_model
from attnkit.quantize.linear import quantize_rows
from attnkit.quantize.smooth import Encodes, lm_calibration
from attnkit.quantize.smooth import input_maxima as smooth_input_maxima

CALIBRATION = [
    "Explain how a rainbow forms.",
    "List three uses of copper and say why.",
    "Write a haiku about the sea at night.",
    "What is the difference between a virus and a bacterium?",
]


class RowInt8Linear(nn.Module):
    """``x W^T + b`` with per-channel int8 weights and per-row symmetric int8 activations;
    with ``smooth`` ``(K,)``, ``(x / smooth) (W * smooth)^T`` instead (SmoothQuant)."""

    def __init__(self, linear: nn.Linear, smooth: Tensor | None = None) -> None:
        super().__init__()
        weight = linear.weight.detach().float()
        self.smooth = smooth
        if smooth is not None:
            weight = weight * smooth
        q, scale = quantize_rows(weight)
        self.weight_t, self.weight_scale = q.t().contiguous(), scale  # (K, N) int8, (N,)
        self.bias = None if linear.bias is None else linear.bias.detach().float()

    def forward(self, x: Tensor) -> Tensor:
        rows = x.reshape(-1, x.size(-1)).float()
        if self.smooth is not None:
            rows = rows / self.smooth
        scale = rows.abs().amax(1, keepdim=True).clamp(min=1e-12) / 127.0  # (M, 1)
        q = torch.round(rows / scale).clamp(-127, 127).to(torch.int8)
        y = torch._int_mm(q, self.weight_t).float() * scale * self.weight_scale
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*x.shape[:-1], -1)


def rows_int8(
    model: nn.Module, keep: Sequence[str] = (), maxima: dict[str, Tensor] | None = None
) -> nn.Module:
    """Every ``nn.Linear`` whose name has none of ``keep`` -> ``RowInt8Linear``, smoothed
    with the input maxima ``maxima[name]`` where given."""
    from attnkit.attention.backends import use_backend
    from attnkit.attention.one_query import OneQueryDecode

    for owner_name, owner in list(model.named_modules()):
        for name, child in list(owner.named_children()):
            full = f"{owner_name}.{name}".lstrip(".")
            if type(child) is nn.Linear and not any(k in full for k in keep):
                smooth = None
                if maxima is not None:
                    w_max = child.weight.detach().float().abs().amax(0).clamp(min=1e-5)
                    smooth = (maxima[full].clamp(min=1e-5) / w_max).sqrt()
                setattr(owner, name, RowInt8Linear(child, smooth))
    use_backend(model, OneQueryDecode())
    return model


def input_maxima(model: nn.Module, prompts: list[list[int]], n: int = 32) -> dict[str, Tensor]:
    """``max|x_j|`` over every input channel of every ``nn.Linear``, from fp32 greedy runs,
    keyed by module name (the probe converts fresh copies of the model);
    ``attnkit.quantize.smooth.input_maxima`` records them."""
    named = {name: m for name, m in model.named_modules() if type(m) is nn.Linear}
    by_id = smooth_input_maxima(
        model, list(named.values()), lambda m: [logits_along(m, p, None, n) for p in prompts]
    )
    return {name: by_id[id(m)] for name, m in named.items() if id(m) in by_id}


Maxima = dict[str, Tensor]
VARIANTS: dict[str, Callable[[nn.Module, Maxima, Encodes], nn.Module]] = {
    "bf16": lambda m, _, __: quantize_model(m, "bf16"),
    "int8w": lambda m, _, __: quantize_model(m, "int8w"),
    "int8": lambda m, _, __: quantize_model(m, "int8"),
    # attnkit's int8 with SmoothQuant, calibrated on its own built-in text (not CALIBRATION)
    "int8_smooth": lambda m, _, tok: quantize_model(m, "int8", calibrate=lm_calibration(tok)),
    "int8_rows": lambda m, _, __: rows_int8(m),
    "int8_rows_fp32_down": lambda m, _, __: rows_int8(m, keep=["down_proj"]),
    "int8_rows_smooth": lambda m, maxima, _: rows_int8(m, maxima=maxima),
}


@torch.inference_mode()
def logits_along(model: nn.Module, prompt: list[int], tokens: list[int] | None, n: int):
    """``(tokens, logits (n, V))``: free greedy when ``tokens`` is None, else teacher-forced."""
    stepper = stepper_for(model)
    ids = torch.tensor([prompt])
    state = stepper.start(ids, max_steps=n)
    token, out, rows = ids[:, -1], [], []
    for t in range(n):
        logits, state = stepper.step(token, state)
        rows.append(logits.float()[0].clone())
        out.append(int(logits.argmax(-1)))
        token = torch.tensor([tokens[t] if tokens is not None else out[-1]])
    return out, torch.stack(rows)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", required=True, help="a decoder-only run (SmolLM2's import)")
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated")
    args = p.parse_args()
    torch.set_num_threads(1)
    tokenizer = load_model(args.checkpoint, "cpu").tokenizer
    assert tokenizer is not None
    prompt, n = tokenizer.encode(PROMPT), args.new_tokens

    def fresh() -> nn.Module:
        return load_model(args.checkpoint, "cpu").model.eval()

    ref, ref_logits = logits_along(fresh(), prompt, None, n)
    chat = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
    maxima = input_maxima(fresh(), [tokenizer.encode(chat.format(c)) for c in CALIBRATION])
    top2 = ref_logits.topk(2, dim=-1).values
    margins = sorted(zip((top2[:, 0] - top2[:, 1]).tolist(), range(n)))[:3]
    rows = []
    for name in args.variants.split(","):
        model = VARIANTS[name](fresh(), maxima, tokenizer)
        free, _ = logits_along(model, prompt, None, n)
        forced, logits = logits_along(model, prompt, ref, n)
        first = next((i for i, (a, b) in enumerate(zip(free, ref)) if a != b), n)
        rel = ((logits - ref_logits).abs().amax(-1) / ref_logits.abs().amax(-1)).tolist()
        same, agree = sum(map(int.__eq__, free, ref)), sum(map(int.__eq__, forced, ref))
        rows.append([name, f"{same}/{n}", str(first), f"{agree}/{n}",
                     f"{statistics.median(rel):.4f}", f"{max(rel):.4f}"])  # fmt: skip
    print(format_table(["variant", "free: tokens = fp32", "first differing", "forced: top-1 = fp32",
                        "logits rel err median", "max"], rows))  # fmt: skip
    print("fp32's smallest top-1/top-2 margins (logit, position): "
          + ", ".join(f"{m:.3f} at {i}" for m, i in margins))  # fmt: skip
    print(f"prompt {len(prompt)} tokens, {n} new; {cpu_name()}")
    for key, value in environment(torch.device("cpu")).items():
        print(f"{key}: {value}")


if __name__ == "__main__":
    sys.exit(main())
