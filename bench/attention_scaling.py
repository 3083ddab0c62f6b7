"""Issue 17: how dense, local and linear attention scale with length on CPU.

Times forward + backward of the attention core alone (no projections) on
``q, k, v`` ``(1, h, T, d)``, batch 1, d_model 256 = 4 heads x 64, fp32, and
measures each point's peak memory; prints a table, where each method becomes
cheaper than dense, and how memory grows per doubling of ``T``. Times are the
best of ``--reps`` steps (the least disturbed on a shared machine; the median
is in the JSON).

Rows:

* ``dense``: ``F.scaled_dot_product_attention`` without a mask (``is_causal``
  with ``--causal``);
* ``local``: ``attnkit.attention.local.local_attention(impl="chunked")``
  (query blocks of 64);
* ``linear``: ``linear_attention`` (``causal_linear_attention`` with ``--causal``);
* ``band_mask``: SDPA with the same band as a dense ``(T, T)`` bool mask
  (naive local attention; only up to ``--max-band-mask``, it is quadratic).

Peak memory, and why this way: torch's CPU allocations are invisible to
``tracemalloc`` and the CPU has no ``max_memory_allocated``. So every
(method, T) point runs in its own subprocess, which (1) builds its inputs and
runs one warm-up step, (2) records its resident set size ``VmRSS``, (3)
resets the kernel's high-water mark (``echo 5 > /proc/self/clear_refs``
resets ``VmHWM`` to the current RSS), (4) runs one step and reads ``VmHWM``.
Peak = ``VmHWM - VmRSS``: the step's own high-water mark (activations kept for
backward, temporaries, the gradients), nothing of the interpreter or of other
points. glibc is told to serve every allocation over 128 KiB by ``mmap``
(``MALLOC_MMAP_THRESHOLD_``, which also stops it raising that threshold), so
freed tensors leave the RSS at once and the warm-up cannot pre-pay the step.
Where ``clear_refs`` is not writable the script falls back to
``ru_maxrss`` after a fresh process (and says so).

    python bench/attention_scaling.py                       # ~5-10 min on 2 cores
    python bench/attention_scaling.py --lengths 1024,2048 --causal --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
METHODS = ("dense", "local", "linear", "band_mask")


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def child(method: str, t: int, args: argparse.Namespace) -> dict:
    """One point: build inputs, warm up, measure peak memory once, then time."""
    import torch
    import torch.nn.functional as F

    sys.path.insert(0, str(REPO))
    from attnkit.attention.linear import causal_linear_attention, linear_attention
    from attnkit.attention.local import local_attention, sliding_window_mask

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    h, d = args.heads, args.d_model // args.heads
    q, k, v = (torch.randn(1, h, t, d, requires_grad=True) for _ in range(3))
    grad = torch.randn(1, h, t, d)

    def forward():
        if method == "dense":
            return F.scaled_dot_product_attention(q, k, v, is_causal=args.causal)
        if method == "local":
            return local_attention(q, k, v, window=args.window, causal=args.causal, impl="chunked")[
                0
            ]
        if method == "linear":
            if args.causal:
                return causal_linear_attention(q, k, v)[0]
            return linear_attention(q, k, v)
        mask = sliding_window_mask(t, window=args.window, causal=args.causal)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    def step():
        forward().backward(grad)
        q.grad = k.grad = v.grad = None

    step()  # warm-up: thread pools, kernels' first-call set-up
    try:
        base = _status_kb("VmRSS")
        Path("/proc/self/clear_refs").write_text("5")
        step()
        peak_kb, how = _status_kb("VmHWM") - base, "VmHWM-VmRSS"
    except OSError:
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        step()
        peak_kb, how = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base, "ru_maxrss"

    times = []
    start = time.perf_counter()
    while len(times) < args.reps and (not times or time.perf_counter() - start < args.budget):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return {
        "method": method,
        "T": t,
        "ms": 1000 * min(times),
        "ms_median": 1000 * statistics.median(times),
        "reps": len(times),
        "peak_mb": peak_kb / 1024,
        "memory_method": how,
    }


def run_point(method: str, t: int, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, __file__, "--child", method, str(t)] + _shared_flags(args)
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="131072", PYTHONPATH=str(REPO))
    try:
        done = subprocess.run(
            cmd, capture_output=True, text=True, env=env, timeout=args.timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return {"method": method, "T": t, "error": f"timed out after {args.timeout} s"}
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or ["?"]
        return {"method": method, "T": t, "error": f"exit {done.returncode}: {tail[0]}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _shared_flags(args: argparse.Namespace) -> list[str]:
    flags = ["--threads", str(args.threads), "--heads", str(args.heads)]
    flags += ["--d-model", str(args.d_model), "--window", str(args.window)]
    flags += ["--reps", str(args.reps), "--budget", str(args.budget)]
    return flags + (["--causal"] if args.causal else [])


def crossover(points: dict, method: str, key: str, lengths: list[int]) -> int | None:
    """Smallest T from which ``method`` stays cheaper than dense in ``key``."""
    found = None
    for t in lengths:
        a, b = points.get((method, t)), points.get(("dense", t))
        if a is None or b is None or key not in a or key not in b:
            continue
        if a[key] < b[key]:
            found = t if found is None else found
        else:
            found = None
    return found


def report(points: dict, methods: list[str], lengths: list[int]) -> str:
    lines = []
    head = f"{'T':>6} | " + " | ".join(f"{m:>21}" for m in methods)
    lines += ["time ms (best of the reps) / peak MB", head, "-" * len(head)]
    for t in lengths:
        cells = []
        for m in methods:
            p = points.get((m, t))
            if p is None:
                cells.append(f"{'-':>21}")
            elif "error" in p:
                cells.append(f"{'error':>21}")
            else:
                cells.append(f"{p['ms']:>10.1f} / {p['peak_mb']:>8.1f}")
        lines.append(f"{t:>6} | " + " | ".join(cells))
    lines.append("")
    lines.append("memory growth per doubling of T (2.0 = linear, 4.0 = quadratic):")
    for m in methods:
        ratios = []
        for a, b in zip(lengths, lengths[1:]):
            pa, pb = points.get((m, a)), points.get((m, b))
            if pa and pb and "peak_mb" in pa and "peak_mb" in pb and pa["peak_mb"] > 0:
                ratios.append(f"{pb['peak_mb'] / pa['peak_mb']:.2f}")
        lines.append(f"  {m:>9}: {' '.join(ratios) or '-'}")
    lines.append("cheaper than dense from (and at every longer T measured):")
    for m in methods:
        if m == "dense":
            continue
        tt = crossover(points, m, "ms", lengths)
        mm = crossover(points, m, "peak_mb", lengths)
        lines.append(f"  {m:>9}: time from T={tt or 'never'}, memory from T={mm or 'never'}")
    errors = [f"  {m} T={t}: {p['error']}" for (m, t), p in points.items() if "error" in p]
    return "\n".join(lines + (["errors:", *errors] if errors else []))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lengths", default="1024,2048,4096,8192,16384")
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--causal", action="store_true")
    p.add_argument("--window", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--budget", type=float, default=20.0, help="stop timing a point after (s)")
    p.add_argument("--timeout", type=float, default=300.0, help="per point subprocess (s)")
    p.add_argument("--max-band-mask", type=int, default=4096)
    p.add_argument("--json", type=Path)
    p.add_argument("--child", nargs=2, metavar=("METHOD", "T"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child[0], int(args.child[1]), args)))
        return

    lengths = [int(x) for x in args.lengths.split(",")]
    methods = [m for m in args.methods.split(",") if m]
    for m in methods:
        if m not in METHODS:
            p.error(f"--methods: unknown {m!r}; choose from {', '.join(METHODS)}")
    load = os.getloadavg()[0]
    print(
        f"attention fwd+bwd, batch 1, d_model {args.d_model}, {args.heads} heads, window "
        f"{args.window}, {'causal' if args.causal else 'bidirectional'}, fp32, "
        f"{args.threads} threads; load average {load:.2f} on {os.cpu_count()} CPUs",
        flush=True,
    )
    points = {}
    for t in lengths:
        for m in methods:
            if m == "band_mask" and t > args.max_band_mask:
                continue
            points[(m, t)] = run_point(m, t, args)
            pt = points[(m, t)]
            msg = pt.get("error") or f"{pt['ms']:.1f} ms, peak {pt['peak_mb']:.1f} MB"
            print(f"  {m:>9} T={t:>6}: {msg}", flush=True)
    print()
    print(report(points, methods, lengths))
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    if args.json:
        out = {
            "settings": {k: v for k, v in vars(args).items() if k not in ("json", "child")},
            "load_average": [load, os.getloadavg()[0]],
            "points": list(points.values()),
        }
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
