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
activations quantised per call, per tensor) and two probes that are not
attnkit precisions (``RowInt8Linear`` below): ``int8_rows``, every linear with
a symmetric int8 scale per activation row (per token) through ``torch._int_mm``,
and ``int8_rows_fp32_down``, the same with the FFN's ``down_proj`` left fp32.
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
from attnkit.decoding.static import stepper_for
from attnkit.quantize import quantize_model
from attnkit.quantize.linear import quantize_rows


class RowInt8Linear(nn.Module):
    """``x W^T + b`` with per-channel int8 weights and per-row symmetric int8 activations."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        q, scale = quantize_rows(linear.weight)
        self.weight_t, self.weight_scale = q.t().contiguous(), scale  # (K, N) int8, (N,)
        self.bias = None if linear.bias is None else linear.bias.detach().float()

    def forward(self, x: Tensor) -> Tensor:
        rows = x.reshape(-1, x.size(-1)).float()
        scale = rows.abs().amax(1, keepdim=True).clamp(min=1e-12) / 127.0  # (M, 1)
        q = torch.round(rows / scale).clamp(-127, 127).to(torch.int8)
        y = torch._int_mm(q, self.weight_t).float() * scale * self.weight_scale
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*x.shape[:-1], -1)


def rows_int8(model: nn.Module, keep: Sequence[str] = ()) -> nn.Module:
    """Every ``nn.Linear`` whose name has none of ``keep`` -> ``RowInt8Linear``."""
    from attnkit.attention.backends import use_backend
    from attnkit.attention.one_query import OneQueryDecode

    for owner_name, owner in list(model.named_modules()):
        for name, child in list(owner.named_children()):
            full = f"{owner_name}.{name}".lstrip(".")
            if type(child) is nn.Linear and not any(k in full for k in keep):
                setattr(owner, name, RowInt8Linear(child))
    use_backend(model, OneQueryDecode())
    return model


VARIANTS: dict[str, Callable[[nn.Module], nn.Module]] = {
    "bf16": lambda m: quantize_model(m, "bf16"),
    "int8w": lambda m: quantize_model(m, "int8w"),
    "int8": lambda m: quantize_model(m, "int8"),
    "int8_rows": rows_int8,
    "int8_rows_fp32_down": lambda m: rows_int8(m, keep=["down_proj"]),
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
    top2 = ref_logits.topk(2, dim=-1).values
    margins = sorted(zip((top2[:, 0] - top2[:, 1]).tolist(), range(n)))[:3]
    rows = []
    for name in args.variants.split(","):
        model = VARIANTS[name](fresh())
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
