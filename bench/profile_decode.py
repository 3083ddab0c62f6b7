"""Issue 12: where a CPU decode of the ``base`` Transformer spends its time (``torch.profiler``).

Builds the issue's setup (``base`` preset, vocabulary 8000, 32 random
sentences of 32 tokens, outputs forced to 40 tokens), decodes once to warm
up, then profiles one greedy and one beam-4 decode through the CPU fast path
(``stepper_for(model, "fast")``: the model's own cache, sized by the search)
and groups the operators' **self** CPU time into buckets:

* ``gemm`` (linear/addmm/mm/bmm, any int8 or oneDNN linear),
* ``attention`` (SDPA and its pieces), ``softmax/log_softmax``,
* ``search`` (topk, sort, argmax, gather, index, where, cat ...),
* ``cache`` (index_copy_, index_select of the cache),
* ``elementwise/norm`` (layer_norm, add, relu, mul, embedding, copy ...),
* ``python/other``: wall time minus every operator's self time (the host's
  interpreter and dispatcher overhead between kernels).

``--quantize PRECISION`` profiles a model converted with
``attnkit.quantize.quantize_model`` instead (``fp32``, ``bf16``, ``int8``), and
``--stepper static`` decodes on the static cache (the GPU's fast path);
``--checkpoint RUN`` profiles a trained translation model instead of a random ``base``.
Run: ``python bench/profile_decode.py --threads 2 [--quantize int8] [--top 25]``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict

import torch
from common import PAD  # bench/ on sys.path; it also puts the repo on it
from torch.profiler import ProfilerActivity, profile

from attnkit.decoding import beam_search, greedy_search
from attnkit.decoding.constraints import MinLength
from attnkit.models import EncoderDecoder, TransformerConfig

BUCKETS: list[tuple[str, tuple[str, ...]]] = [
    ("gemm", ("linear", "addmm", "::mm", "bmm", "matmul", "int_mm", "qlinear", "_linear_pointwise",
              "linear_dynamic", "int8pack", "int4pack", "mkl_linear", "baddbmm")),
    ("attention", ("scaled_dot_product", "_flash_attention", "_efficient_attention")),
    ("softmax/log_softmax", ("softmax",)),
    ("cache", ("index_copy", "index_select")),
    ("search", ("topk", "sort", "argmax", "gather", "index", "where", "cat", "masked_fill",
                "eq", "lt", "le", "any", "all", "arange", "full", "div", "remainder", "floor")),
]  # fmt: skip


def bucket(name: str) -> str:
    for label, keys in BUCKETS:
        if any(k in name for k in keys):
            return label
    return "elementwise/norm/other ops"


def build(vocab: int, seed: int = 0) -> EncoderDecoder:
    cfg = TransformerConfig.from_preset(
        "base", src_vocab_size=vocab, tgt_vocab_size=vocab, dropout=0.0
    )
    torch.manual_seed(seed)
    return EncoderDecoder(cfg).eval()


def source(n: int, s: int, vocab: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, vocab, (n, s), generator=g)
    return src


def breakdown(prof: profile, wall: float) -> dict[str, float]:
    """Seconds per bucket; ``python/other`` is the wall time no operator accounts for."""
    out: dict[str, float] = defaultdict(float)
    for evt in prof.key_averages():
        if evt.key.startswith("ProfilerStep") or evt.key.startswith("## "):
            continue
        out[bucket(evt.key)] += evt.self_cpu_time_total / 1e6
    # Self times of nested ops on other threads (intra-op) can exceed the wall; clamp.
    out["python/other"] = max(0.0, wall - sum(out.values()))
    return dict(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--src-len", type=int, default=32)
    p.add_argument("--out-len", type=int, default=40)
    p.add_argument("--quantize", help="profile attnkit.quantize.quantize_model(model, PRECISION)")
    p.add_argument("--checkpoint", help="a trained translation checkpoint instead of a random "
                   "`base` (its vocabulary then; the sources stay random ids)")  # fmt: skip
    p.add_argument(
        "--stepper",
        choices=("model", "static"),
        default="model",
        help="model: EncoderDecoder's own start/step (the CPU fast path); static: "
        "attnkit.decoding.StaticCacheStepper",
    )
    p.add_argument("--top", type=int, default=15, help="operators listed per search")
    p.add_argument("--runs", type=int, default=3, help="profiled runs per search (median)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    if args.checkpoint:
        from attnkit.checkpoints.loading import load_model

        model = load_model(args.checkpoint, "cpu").model.eval()
        args.vocab = model.config.src_vocab_size
    else:
        model = build(args.vocab)
    if args.quantize:
        from attnkit.quantize import quantize_model

        model = quantize_model(model, args.quantize)
    src = source(args.batch, args.src_len, args.vocab)
    assert not (src == PAD).any()
    if args.stepper == "static":
        from attnkit.decoding import StaticCacheStepper

        stepper = StaticCacheStepper(model)
    else:
        stepper = model
    forced = MinLength(stepper, args.out_len)
    searches = {
        "greedy": lambda: greedy_search(forced, src, max_len=args.out_len),
        "beam4": lambda: beam_search(forced, src, beam_size=4, max_len=args.out_len),
    }
    searches["encoder"] = lambda: stepper.start(src, max_steps=args.out_len)
    with torch.inference_mode():
        for run in searches.values():
            run()  # warm-up (oneDNN primitive caches, allocator)
        walls: dict[str, list[float]] = defaultdict(list)
        parts: dict[str, list[dict[str, float]]] = defaultdict(list)
        last: dict[str, profile] = {}
        for _ in range(args.runs):  # round-robin: load from other processes hits all alike
            for name, run in searches.items():
                with profile(activities=[ProfilerActivity.CPU]) as prof:
                    t0 = time.perf_counter()
                    run()
                    wall = time.perf_counter() - t0
                walls[name].append(wall)
                parts[name].append(breakdown(prof, wall))
                last[name] = prof
    enc = statistics.median(walls["encoder"])
    for name in ("greedy", "beam4"):
        wall = statistics.median(walls[name])
        runs = ", ".join(f"{w:.2f}" for w in walls[name])
        print(f"\n## {name}: {wall:.3f} s wall, median of {args.runs} "
              f"({args.batch / wall:.1f} sentences/s; runs {runs}); "
              f"encoder + cross K/V alone {enc:.3f} s; {args.threads} threads")  # fmt: skip
        labels = sorted({k for d in parts[name] for k in d})
        med = {k: statistics.median(d.get(k, 0.0) for d in parts[name]) for k in labels}
        enc_med = {k: statistics.median(d.get(k, 0.0) for d in parts["encoder"]) for k in labels}
        print(f"  {'bucket':28s} {'search s':>9s} {'%':>6s} {'of which decode steps s':>24s}")
        for label in sorted(labels, key=lambda k: -med[k]):
            dec = max(0.0, med[label] - enc_med[label])
            print(f"  {label:28s} {med[label]:9.3f} {100 * med[label] / wall:5.1f}% {dec:24.3f}")
        print(last[name].key_averages().table(sort_by="self_cpu_time_total", row_limit=args.top))


if __name__ == "__main__":
    main()
