"""Issue 12: every linear-layer (GEMM) path torch 2.13 offers on this CPU, at decode shapes.

One decode step of the ``base`` Transformer multiplies ``M = batch * beams``
rows (32 greedy, 128 beam 4, for 32 sentences) by these weights (``K`` in,
``N`` out): 512x1536 (fused self-attention QKV), 512x512 (cross query, out
projections), 512x2048 and 2048x512 (FFN), 512x8000 (output projection).
Each path below computes ``y = x W^T + b`` in fp32 out; the table gives
GFLOP/s (``2 M K N`` per call, median of round-robin rounds) and the max abs
error against an fp64 reference, also relative to the reference's max abs.

Paths (``--paths``, comma-separated; ``all`` by default):

* ``fp32``          -- ``F.linear`` (aten addmm -> MKL sgemm);
* ``fp32_mkl``      -- MKL's packed sgemm (``torch.ops.mkl._mkl_linear``, what
  inductor's ``freezing`` uses on CPU), weight packed once for ``M``;
* ``fp32_dnnl``     -- oneDNN with a prepacked weight (``mkldnn._linear_pointwise``);
* ``bf16``          -- ``F.linear`` on bf16 weights and activations (AVX512-BF16);
* ``bf16_dnnl``     -- oneDNN bf16, prepacked weight;
* ``w8``            -- ``torch._weight_int8pack_mm``: int8 weights, fp32 activations;
* ``w8_bf16``       -- the same with bf16 activations;
* ``int_mm_row``    -- dynamic symmetric per-row int8 activations (hand-written),
  ``torch._int_mm`` (s8 x s8 -> s32), then scales and bias;
* ``dnnl_qlinear``  -- dynamic per-tensor u8 activations, ``onednn.qlinear_pointwise``
  (u8 x s8 on VNNI, scales and bias fused, fp32 out), weight prepacked;
* ``dyn_fbgemm``, ``dyn_onednn`` -- ``quantized.linear_dynamic`` (what the
  deprecated ``quantize_dynamic`` calls), per-channel weights, on each engine;
* ``ao_dyn``, ``ao_w8`` -- torchao ``Int8DynamicActivationInt8WeightConfig`` /
  ``Int8WeightOnlyConfig`` in eager; ``ao_dyn_c``, ``ao_w8_c`` the same under
  ``torch.compile`` (inductor C++; compile time printed).

Run: ``python bench/gemm_paths.py --threads 2 --rounds 5 --json gemm.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import warnings
from collections.abc import Callable

import torch
import torch.nn.functional as F
from common import cpu_name, environment, format_table, load_average
from torch import Tensor

SHAPES = [(512, 1536), (512, 512), (512, 2048), (2048, 512), (512, 8000)]
ALL_PATHS = [
    "fp32", "fp32_mkl", "fp32_dnnl", "bf16", "bf16_dnnl", "w8", "w8_bf16", "int_mm_row",
    "dnnl_qlinear", "dyn_fbgemm", "dyn_onednn", "ao_dyn", "ao_w8", "ao_dyn_c", "ao_w8_c",
]  # fmt: skip

Linear = Callable[[Tensor], Tensor]


def quantize_rows(w: Tensor) -> tuple[Tensor, Tensor]:
    """Symmetric per-row int8: ``w ~= q * scale[:, None]``, ``q`` in [-127, 127]."""
    scale = w.abs().amax(dim=1).clamp(min=1e-8) / 127.0
    return torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8), scale


def make_path(name: str, w: Tensor, b: Tensor, m: int) -> Linear:
    """A function ``x (m, K) fp32 -> (m, N) fp32`` computing ``x w^T + b`` by path ``name``."""
    n = w.size(0)
    if name == "fp32":
        return lambda x: F.linear(x, w, b)
    if name == "fp32_mkl":
        packed = torch.ops.mkl._mkl_reorder_linear_weight(w, m)
        return lambda x: torch.ops.mkl._mkl_linear(x, packed, w, b, m)
    if name in ("fp32_dnnl", "bf16_dnnl"):
        dt = torch.float32 if name == "fp32_dnnl" else torch.bfloat16
        packed = torch.ops.mkldnn._reorder_linear_weight(w.to(dt), m)
        bb = b.to(dt)
        return lambda x: torch.ops.mkldnn._linear_pointwise(
            x.to(dt), packed, bb, "none", [], ""
        ).float()
    if name == "bf16":
        wb, bb = w.bfloat16(), b.bfloat16()
        return lambda x: F.linear(x.bfloat16(), wb, bb).float()
    if name in ("w8", "w8_bf16"):
        q, s = quantize_rows(w)
        if name == "w8":
            return lambda x: torch._weight_int8pack_mm(x, q, s) + b
        sb, bb = s.bfloat16(), b.bfloat16()
        return lambda x: (torch._weight_int8pack_mm(x.bfloat16(), q, sb) + bb).float()
    if name == "int_mm_row":
        q, s = quantize_rows(w)
        qt = q.t()  # (K, N) view; _int_mm takes (M, K) x (K, N)

        def int_mm(x: Tensor) -> Tensor:
            xs = x.abs().amax(dim=1, keepdim=True).clamp(min=1e-8) / 127.0
            xq = torch.round(x / xs).to(torch.int8)
            return torch.addcmul(b, torch._int_mm(xq, qt).float(), xs * s)

        return int_mm
    if name == "dnnl_qlinear":
        q, s = quantize_rows(w)
        packed = torch.ops.onednn.qlinear_prepack(q, [m, w.size(1)])
        zeros = torch.zeros(n, dtype=torch.long)

        def qlinear(x: Tensor) -> Tensor:
            lo, hi = torch.aminmax(x)
            scale = float(torch.clamp((hi - lo) / 255.0, min=1e-8))
            zp = int(torch.clamp(torch.round(-lo / scale), 0, 255))
            xq = torch.clamp(torch.round(x / scale) + zp, 0, 255).to(torch.uint8)
            return torch.ops.onednn.qlinear_pointwise(
                xq, scale, zp, packed, s, zeros, b, 1.0, 0, torch.float32, "none", [], ""
            )

        return qlinear
    if name in ("dyn_fbgemm", "dyn_onednn"):
        engine = name.removeprefix("dyn_")
        torch.backends.quantized.engine = engine
        q, s = quantize_rows(w)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # quantized tensors are deprecated in 2.13
            qw = torch._make_per_channel_quantized_tensor(q, s.double(), torch.zeros(n).long(), 0)
            packed = torch.ops.quantized.linear_prepack(qw, b)

        def dynamic(x: Tensor) -> Tensor:
            torch.backends.quantized.engine = engine  # both paths share one global switch
            return torch.ops.quantized.linear_dynamic(x, packed, False)

        return dynamic
    if name.startswith("ao_"):
        from torchao.quantization import (
            Int8DynamicActivationInt8WeightConfig,
            Int8WeightOnlyConfig,
            quantize_,
        )

        lin = torch.nn.Linear(w.size(1), n)
        with torch.no_grad():
            lin.weight.copy_(w)
            lin.bias.copy_(b)
        dyn = name.startswith("ao_dyn")
        quantize_(lin, Int8DynamicActivationInt8WeightConfig() if dyn else Int8WeightOnlyConfig())
        if name.endswith("_c"):
            # One compile per (shape, module): lift dynamo's limit of 8 recompiles of
            # Linear.forward, past which it silently runs eagerly.
            torch._dynamo.config.recompile_limit = 256
            torch._dynamo.config.cache_size_limit = 256
            return torch.compile(lin, dynamic=False)
        return lin
    raise ValueError(f"unknown path {name!r}")


def time_calls(fn: Linear, x: Tensor, calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        fn(x)
    return (time.perf_counter() - t0) / calls


def weights(k: int, n: int, seed: int) -> tuple[Tensor, Tensor]:
    """Xavier-uniform weights (attnkit's init) and a small bias."""
    g = torch.Generator().manual_seed(seed)
    bound = (6.0 / (k + n)) ** 0.5
    w = (torch.rand(n, k, generator=g) * 2 - 1) * bound
    return w, torch.randn(n, generator=g) * 0.02


def activations(m: int, k: int, seed: int) -> Tensor:
    """LayerNorm-like rows for K=512 inputs; ReLU outputs (sparse, >= 0) for the FFN's 2048."""
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(m, k, generator=g)
    return torch.relu(x) if k > 512 else x


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=5, help="round-robin rounds (median)")
    p.add_argument("--ms", type=float, default=20.0, help="target milliseconds per timing")
    p.add_argument("--rows", default="32,128", help="M values (batch * beams)")
    p.add_argument("--paths", default="all")
    p.add_argument("--json")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    paths = ALL_PATHS if args.paths == "all" else args.paths.split(",")
    env = environment(torch.device("cpu"))
    print(f"{cpu_name()}, {args.threads} threads, torch {torch.__version__}, {env['date']}, "
          f"load {load_average()}")  # fmt: skip
    results = []
    torch.inference_mode().__enter__()
    for m in (int(r) for r in args.rows.split(",")):
        for k, n in SHAPES:
            w, b = weights(k, n, seed=k * 7 + n)
            x = activations(m, k, seed=n)
            ref = (x.double() @ w.double().t() + b.double()).float()
            fns, calls, setup = {}, {}, {}
            for name in paths:
                t0 = time.perf_counter()
                try:
                    fn = make_path(name, w, b, m)
                    y = fn(x)  # first call: compiles for the _c paths
                    fn(x)
                except Exception as err:  # a path missing on this build: say so, go on
                    print(f"  {name} M={m} {k}x{n}: unavailable ({type(err).__name__}: "
                          f"{str(err)[:120]})")  # fmt: skip
                    continue
                setup[name] = time.perf_counter() - t0
                err = float((y.float() - ref).abs().max())
                per = time_calls(fn, x, 3)
                fns[name] = fn
                calls[name] = max(3, int(args.ms / 1000 / max(per, 1e-6)))
                results.append({"path": name, "m": m, "k": k, "n": n, "max_abs_err": err,
                                "rel_err": err / float(ref.abs().max()),
                                "setup_s": setup[name], "seconds": []})  # fmt: skip
            for _ in range(args.rounds):
                for name, fn in fns.items():
                    t = time_calls(fn, x, calls[name])
                    rec = next(r for r in results if (r["path"], r["m"], r["k"], r["n"]) ==
                               (name, m, k, n))  # fmt: skip
                    rec["seconds"].append(t)
    for r in results:
        r["median_s"] = statistics.median(r["seconds"])
        r["gflops"] = 2 * r["m"] * r["k"] * r["n"] / r["median_s"] / 1e9
    shapes = [(m, k, n) for m in map(int, args.rows.split(",")) for k, n in SHAPES]
    headers = ["path"] + [f"M{m} {k}x{n}" for m, k, n in shapes] + ["max rel err"]
    rows = []
    for name in paths:
        mine = {(r["m"], r["k"], r["n"]): r for r in results if r["path"] == name}
        if not mine:
            continue
        cells = [f"{mine[s]['gflops']:.0f}" if s in mine else "-" for s in shapes]
        rows.append([name, *cells, f"{max(r['rel_err'] for r in mine.values()):.1e}"])
    print("\nGFLOP/s (median of rounds), fp32 out; error vs fp64, relative to max |y|\n")
    print(format_table(headers, rows))
    slow_setup = {r["path"]: r["setup_s"] for r in results if r["setup_s"] > 1.0}
    if slow_setup:
        print("\nsetup incl. first call (s, last shape): " + ", ".join(
            f"{k} {v:.1f}" for k, v in slow_setup.items()))  # fmt: skip
    print(f"load average at the end: {load_average()}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"env": env, "threads": args.threads, "results": results}, f, indent=2)


if __name__ == "__main__":
    main()
