"""Training throughput of attnkit (eager and fast) and its peers, in one run, on one batch.

A step is: forward, label-smoothed cross-entropy (eps 0.1, padding ignored),
backward, AdamW step, zero_grad; bf16 autocast on CUDA, fp32 on CPU. The
models (built by ``train_step.py``: same sizes, tied embeddings, dropout,
random init) are:

* ``attnkit``       -- eager, the peers' loss (``F.cross_entropy`` on full
  logits) and optimizer (``torch.optim.AdamW`` defaults): the baseline;
* ``attnkit_fast``  -- attnkit with the features in ``--fast`` (default all):
  ``compile`` (``torch.compile`` of forward + loss; backward is compiled
  with it by AOTAutograd), ``chunked`` (``chunked_label_smoothed_cross_entropy``:
  no full fp32 logits), ``fused`` (``AdamW(fused=True)`` where the device
  supports it, else ``foreach=True``), ``onednn`` (fp32 linears on oneDNN's
  GEMM, one of ``train.cpu_matmul``'s two choices on a CPU), ``bf16`` (bf16
  autocast on a CPU too: ``train.precision: bf16``; AMX or AVX512-BF16 products);
* ``attnkit+compile``, ``attnkit+chunked+fused``, ... -- any subset, for
  ablations (one row per change, as bench/NOTES.md asks); ``hf+bf16``,
  ``torch_nn+bf16``: the peers under the same autocast;
* ``torch_nn``      -- ``torch.nn.Transformer`` wrapped as a user would;
* ``hf``            -- HF ``MarianMTModel`` (sdpa), when transformers is installed.

Columns: target tokens/s (real, non-pad labels), TFLOP/s and MFU (FLOPs of
one eager forward+backward with the plain loss, counted once per model with
``FlopCounterMode``: model FLOPs, so the chunked loss's recomputed projection
is not counted; MFU against a matmul peak measured in this run), peak memory
(CUDA ``max_memory_allocated`` of one step over what was allocated before the
model was built: weights, grads, AdamW state, activations; n/a on CPU), and
the ratio of tokens/s to each peer. Timing is round-robin (``common.round_robin``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
from collections.abc import Callable

import torch
import torch.nn.functional as F

# common also puts the repo on sys.path, so this runs from a checkout without installing.
from common import (
    PAD,
    count_flops,
    environment,
    format_table,
    load_average,
    make_batch,
    median,
    peak_flops,
    round_robin,
    sync,
)
from torch import Tensor
from train_step import build

from attnkit.losses import chunked_label_smoothed_cross_entropy
from attnkit.models import TransformerConfig

# name -> (attnkit preset, batch, source length, target length, vocabulary)
SHAPES = {
    "small": ("small", 16, 32, 32, 8000),  # CPU-sized
    "base": ("base", 200, 64, 64, 32000),  # issue #6: the paper's base model
    "big": ("big", 200, 64, 64, 32000),  # issue #6: the paper's big model
}
FEATURES = ("compile", "chunked", "fused", "onednn", "bf16")
MODELS = ("attnkit", "attnkit_fast", "torch_nn", "hf")
PEERS = ("torch_nn", "hf")
EPS = 0.1


def parse_model(name: str, fast: tuple[str, ...]) -> tuple[str, frozenset[str]]:
    """``(base model, features)`` of a model name; raises SystemExit on a bad one."""
    if name == "attnkit_fast":
        return "attnkit", frozenset(fast)
    base, *features = name.split("+")
    if set(features) - {"bf16"} and base != "attnkit":
        raise SystemExit(f"--models: only attnkit takes +features but bf16, got {name!r}")
    if bad := set(features) - set(FEATURES):
        raise SystemExit(f"--models: unknown features {sorted(bad)} in {name!r}; use {FEATURES}")
    if base not in ("attnkit", "torch_nn", "torch_nn_paper", "hf"):
        raise SystemExit(f"--models: unknown model {name!r}")
    return base, frozenset(features)


def adamw(params, device: torch.device, fused: bool) -> tuple[torch.optim.Optimizer, str]:
    """AdamW (lr 1e-4); with ``fused``: the fused kernel if the device has one, else foreach."""
    params = list(params)
    if not fused:
        return torch.optim.AdamW(params, lr=1e-4), "default"
    try:
        return torch.optim.AdamW(params, lr=1e-4, fused=True), "fused"
    except (RuntimeError, ValueError):  # no fused kernel for this device/dtype
        return torch.optim.AdamW(params, lr=1e-4, foreach=True), "foreach"


def loss_function(
    base: str, model, forward, chunked: bool
) -> Callable[[Tensor, Tensor, Tensor], Tensor]:
    """``loss(src, tgt, labels)``: mean label-smoothed CE over non-pad targets."""
    if chunked:
        if base != "attnkit":
            raise SystemExit("the chunked loss is attnkit's (it needs the hidden states)")

        def chunked_loss(src: Tensor, tgt: Tensor, labels: Tensor) -> Tensor:
            hidden = model(src, tgt, compute_logits=False).hidden
            return chunked_label_smoothed_cross_entropy(
                hidden, model.output_proj.weight, labels, epsilon=EPS, ignore_index=PAD,
                reduction="mean",
            ).loss  # fmt: skip

        return chunked_loss

    def plain_loss(src: Tensor, tgt: Tensor, labels: Tensor) -> Tensor:
        logits = forward(src, tgt).flatten(0, 1).float()
        return F.cross_entropy(logits, labels.flatten(), ignore_index=PAD, label_smoothing=EPS)

    return plain_loss


def prepare(name: str, c: TransformerConfig, batch: dict[str, Tensor], args, device) -> dict:
    """Build ``name``, count its FLOPs, warm it up; returns its step and figures."""
    base, features = parse_model(name, args.fast_features)
    torch.manual_seed(0)
    cuda = device.type == "cuda"
    sync(device)
    if cuda:
        before = torch.cuda.memory_allocated(device)  # the other models' weights and state
    model, forward = build(base, c)
    model.to(device).train()
    if "onednn" in features:  # what attnkit train does on a CPU (train.cpu_matmul: auto)
        from attnkit.kernels.onednn_linear import use_onednn_linear

        use_onednn_linear(model)
    opt, opt_kind = adamw(model.parameters(), device, "fused" in features)
    # bf16 autocast: always on CUDA; on a CPU with +bf16 (AMX or AVX512-BF16 products)
    amp = torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda or "bf16" in features)
    src, tgt, labels = batch["src"], batch["tgt"], batch["labels"]

    eager_plain = loss_function(base, model, forward, chunked=False)
    loss_fn = loss_function(base, model, forward, chunked="chunked" in features)
    compiled = "compile" in features or (args.compile_peers and base != "attnkit")
    if compiled:
        loss_fn = torch.compile(loss_fn, mode=args.compile_mode)

    def flops_step() -> None:  # model FLOPs: eager, plain loss, forward + backward
        with amp:
            loss = eager_plain(src, tgt, labels)
        loss.backward()

    flops = count_flops(flops_step) if not args.no_flops else None
    opt.zero_grad(set_to_none=True)

    def step() -> None:
        with amp:
            loss = loss_fn(src, tgt, labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(args.warmup):  # the first one compiles, when compiling
        step()
    peak = None
    if cuda:
        sync(device)
        torch.cuda.reset_peak_memory_stats(device)
        step()
        sync(device)
        peak = (torch.cuda.max_memory_allocated(device) - before) / 2**20
    parts = [f for f in FEATURES if f in features] or ["eager"]
    if compiled and "compile" not in features:
        parts.append("compile")
    return {
        "model": name,
        "setup": "+".join(parts) + ("" if opt_kind == "default" else f" ({opt_kind} AdamW)"),
        "step": step,
        "params": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "flops": flops,
        "peak_mem_mib": peak,
    }


def parse_args() -> argparse.Namespace:
    fmt = argparse.RawDescriptionHelpFormatter
    p = argparse.ArgumentParser(description=__doc__, formatter_class=fmt)
    p.add_argument("--shape", choices=SHAPES, help="default: base on CUDA, small on CPU")
    p.add_argument("--batch", type=int, help="override the shape's batch size (rows)")
    p.add_argument("--models", default=",".join(MODELS),
                   help="comma-separated: attnkit, attnkit_fast, attnkit+<features>, torch_nn, "
                        "torch_nn_paper, hf (default: %(default)s)")  # fmt: skip
    p.add_argument("--fast", default="compile,chunked,fused",
                   help="attnkit_fast's features, from compile, chunked, fused, onednn "
                        "(default: %(default)s)")  # fmt: skip
    p.add_argument("--compile-peers", action="store_true",
                   help="also torch.compile the peers' forward + loss")  # fmt: skip
    p.add_argument(
        "--compile-mode",
        default=None,
        help="torch.compile mode for compiled steps (default: torch's default)",
    )
    p.add_argument("--warmup", type=int, default=3, help="untimed steps per model (default 3)")
    p.add_argument("--steps", type=int, default=10, help="timed rounds (default 10)")
    p.add_argument("--device", help="cuda, cpu, ... (default: cuda if available)")
    p.add_argument("--no-flops", action="store_true", help="skip FLOP counting and MFU")
    p.add_argument("--json", metavar="PATH", help="also write environment and figures as JSON")
    args = p.parse_args()
    args.fast_features = tuple(f.strip() for f in args.fast.split(",") if f.strip())
    if bad := set(args.fast_features) - set(FEATURES):
        p.error(f"--fast: unknown {sorted(bad)}; choose from {FEATURES}")
    return args


def ratio(x: float | None, y: float | None) -> str:
    return "-" if not x or not y else f"{x / y:.2f}x"


def main() -> None:
    args = parse_args()
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    shape = args.shape or ("base" if device.type == "cuda" else "small")
    preset, b, s, t, vocab = SHAPES[shape]
    b = args.batch or b
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    for m in models:
        parse_model(m, args.fast_features)
    if "hf" in models and importlib.util.find_spec("transformers") is None:
        print("transformers is not installed: skipping hf")
        models.remove("hf")
    c = TransformerConfig.from_preset(preset, src_vocab_size=vocab, tgt_vocab_size=vocab)
    batch = {k: v.to(device) for k, v in make_batch(b, s, t, vocab).items()}

    env = environment(device)
    for key, value in env.items():
        print(f"{key}: {value}")
    precision = "bf16 autocast" if device.type == "cuda" else "fp32"
    print(
        f"shape: {shape} (d {c.d_model}, {c.num_heads} heads, d_ff {c.d_ff}, "
        f"{c.num_encoder_layers}+{c.num_decoder_layers} layers, vocab {vocab}, dropout "
        f"{c.dropout}), batch {b} x {s} src + {t} tgt tokens, {precision}, warmup "
        f"{args.warmup}, steps {args.steps}, attnkit_fast = {'+'.join(args.fast_features)}"
    )
    peak, peak_how = (None, "skipped") if args.no_flops else peak_flops(device)
    if peak:
        print(f"measured peak: {peak / 1e12:.2f} TFLOP/s ({peak_how})")
    print()

    prepared = [prepare(m, c, batch, args, device) for m in models]
    times = round_robin({p["model"]: p["step"] for p in prepared}, args.steps, device)
    tokens = int((batch["labels"] != PAD).sum())
    results = []
    for p in prepared:
        ts = times[p["model"]]
        sec = median(ts)
        tflops = p["flops"] / sec / 1e12 if p["flops"] else None
        results.append({
            "model": p["model"], "setup": p["setup"], "params": p["params"],
            "step_ms": 1000 * sec, "step_ms_min": 1000 * min(ts), "step_ms_max": 1000 * max(ts),
            "tgt_tokens_per_s": tokens / sec, "flops_per_step": p["flops"], "tflops": tflops,
            "mfu": tflops * 1e12 / peak if tflops and peak else None,
            "peak_mem_mib": p["peak_mem_mib"], "step_ms_all": [1000 * x for x in ts],
        })  # fmt: skip
    speed = {r["model"]: r["tgt_tokens_per_s"] for r in results}
    peers = [m for m in PEERS if m in speed]
    rows = []
    for r in results:
        rows.append([
            r["model"], r["setup"], f"{r['params'] / 1e6:.1f}M",
            f"{r['step_ms']:.1f} ({r['step_ms_min']:.0f}-{r['step_ms_max']:.0f})",
            f"{r['tgt_tokens_per_s']:,.0f}",
            "n/a" if r["tflops"] is None else f"{r['tflops']:.2f}",
            "n/a" if r["mfu"] is None else f"{100 * r['mfu']:.1f}%",
            "n/a" if r["peak_mem_mib"] is None else f"{r['peak_mem_mib']:,.0f}",
            *(ratio(r["tgt_tokens_per_s"], speed[m]) for m in peers),
        ])  # fmt: skip
    headers = ["model", "setup", "params", "step ms, median (min-max)", "tgt tok/s", "TFLOP/s",
               "MFU", "peak MiB", *(f"vs {m}" for m in peers)]  # fmt: skip
    print(format_table(headers, rows))
    print(f"\n{tokens} real target tokens per step; load average at the end: {load_average()}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"env": env, "shape": shape, "batch": b, "peak_flops": peak,
                       "peak_how": peak_how, "args": {k: v for k, v in vars(args).items()},
                       "results": results}, f, indent=2, default=str)  # fmt: skip
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
