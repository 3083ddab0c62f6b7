"""oneDNN linear backward: transposed views against contiguous copies (issue 23).

``OneDNNLinear.backward`` computes ``grad_x = grad_y W`` and ``grad_W = grad_y^T x``
as oneDNN linears. Until round 6 it passed ``W^T``, ``grad_y^T`` and ``x^T`` as
contiguous copies; now it passes the transposed views (oneDNN reads strides).
This times both, per backward of one layer, at the shapes of SmolLM2-135M LoRA
training (1,024 rows; frozen weights: ``grad_x`` only) and MiniLM full
fine-tuning on SST-2 (~416 rows; ``grad_x`` and ``grad_W``), median of rounds.

    python bench/onednn_backward.py --threads 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from common import REPO, environment

sys.path.insert(0, str(REPO))
from attnkit.kernels.torch_ops import onednn_linear as dnnl  # noqa: E402

# (name, rows M, out N, in K, weight gradient?)
SHAPES = [
    ("smollm2 q/o 576x576", 1024, 576, 576, False),
    ("smollm2 k/v 192x576", 1024, 192, 576, False),
    ("smollm2 up/gate 1536x576", 1024, 1536, 576, False),
    ("smollm2 down 576x1536", 1024, 576, 1536, False),
    ("smollm2 lm_head 49152x576", 1024, 49152, 576, False),
    ("minilm qkv 1152x384", 416, 1152, 384, True),
    ("minilm o 384x384", 416, 384, 384, True),
    ("minilm up 1536x384", 416, 1536, 384, True),
    ("minilm down 384x1536", 416, 384, 1536, True),
]


def copies(g, w, x, weight_grad):
    gx = dnnl(g, w.t().contiguous(), None)
    gw = dnnl(g.t().contiguous(), x.t().contiguous(), None) if weight_grad else None
    return gx, gw


def views(g, w, x, weight_grad):
    gx = dnnl(g, w.t(), None)
    gw = dnnl(g.t(), x.t(), None) if weight_grad else None
    return gx, gw


def timed(fn, *args, reps: int) -> float:
    fn(*args)
    start = time.perf_counter()
    for _ in range(reps):
        fn(*args)
    return (time.perf_counter() - start) / reps


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--json")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    env = environment(torch.device("cpu"))
    print(" | ".join(f"{k}: {v}" for k, v in env.items()))
    rows = []
    for name, m, n, k, weight_grad in SHAPES:
        g, w, x = torch.randn(m, n), torch.randn(n, k), torch.randn(m, k)
        a, b = copies(g, w, x, weight_grad), views(g, w, x, weight_grad)
        for got, ref in zip(b, a):
            if got is not None:
                torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-3)
        reps = max(1, int(2e9 / (2 * m * n * k * (2 if weight_grad else 1))))
        old, new = [], []
        for _ in range(args.rounds):  # alternating, so drift hits both
            old.append(timed(copies, g, w, x, weight_grad, reps=reps))
            new.append(timed(views, g, w, x, weight_grad, reps=reps))
        row = {"shape": name, "copies_ms": statistics.median(old) * 1e3,
               "views_ms": statistics.median(new) * 1e3}  # fmt: skip
        row["speedup"] = row["copies_ms"] / row["views_ms"]
        rows.append(row)
        print(f"{name:28s} copies {row['copies_ms']:8.2f} ms  views {row['views_ms']:8.2f} ms"
              f"  {row['speedup']:.2f}x", flush=True)  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps({"env": env, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
