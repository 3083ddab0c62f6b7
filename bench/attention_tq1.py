"""One decode step's attention (one query per row) on the CPU: which formulation is fastest.

Issue 12's profile puts attention at one query per row at 30-46% of an int8
greedy step. This times the candidates at a decode step's shapes, round-robin,
each on the same tensors, and checks they agree:

* ``attend``: ``attnkit.attention.attend`` as the decoder calls it today (bool
  mask, the empty-row guard, SDPA);
* ``sdpa_bool``: SDPA with the bool mask, no guard;
* ``sdpa_float``: SDPA with an additive float mask made once per batch (0 or -inf);
* ``bmm``: ``baddbmm(mask, q, k^T) -> softmax -> bmm`` on ``(B*h, 1, T)``;
* ``compiled``: the ``bmm`` formulation under ``torch.compile`` (inductor's C++).

    python bench/attention_tq1.py --threads 2 --rounds 30
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from common import environment, format_table, median, round_robin
from torch import Tensor

from attnkit.attention.functional import attend


def bmm_attention(q: Tensor, k: Tensor, v: Tensor, float_mask: Tensor) -> Tensor:
    """``q`` ``(B, h, 1, d)``, ``k``/``v`` ``(B, h, T, d)``, ``float_mask`` ``(B, 1, 1, T)``."""
    b, h, _, d = q.shape
    t = k.size(-2)
    scores = torch.baddbmm(
        float_mask.expand(b, h, 1, t).reshape(b * h, 1, t),
        q.reshape(b * h, 1, d),
        k.reshape(b * h, t, d).transpose(1, 2),
        alpha=1.0 / math.sqrt(d),
    )
    weights = torch.softmax(scores, dim=-1)
    return torch.bmm(weights, v.reshape(b * h, t, d)).view(b, h, 1, d)


def contenders(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor, float_mask: Tensor, compiled: Any
) -> dict[str, Callable[[], Tensor]]:
    steps: dict[str, Callable[[], Tensor]] = {
        "attend": lambda: attend(q, k, v, mask=mask)[0],
        "sdpa_bool": lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
        "sdpa_float": lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=float_mask),
        "bmm": lambda: bmm_attention(q, k, v, float_mask),
    }
    if compiled is not None:
        steps["compiled"] = lambda: compiled(q, k, v, float_mask)
    return steps


def shapes(args: argparse.Namespace) -> list[tuple[str, int, int]]:
    """(what, rows, keys): cross-attention over the source, self-attention over a cache."""
    return [
        ("cross, greedy", args.batch, args.src_len),
        ("self, greedy", args.batch, args.tgt_len),
        ("cross, beam 4", args.batch * 4, args.src_len),
        ("self, beam 4", args.batch * 4, args.tgt_len),
    ]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--src-len", type=int, default=32)
    p.add_argument("--tgt-len", type=int, default=40)
    p.add_argument("--no-compile", action="store_true", help="leave out the compiled row")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    compiled = None if args.no_compile else torch.compile(bmm_attention, dynamic=False)
    results, rows = [], []
    for what, b, t in shapes(args):
        q = torch.randn(b, args.heads, 1, args.head_dim)
        k = torch.randn(b, args.heads, t, args.head_dim)
        v = torch.randn(b, args.heads, t, args.head_dim)
        lengths = torch.randint(t // 2, t + 1, (b,))
        mask = (torch.arange(t) < lengths[:, None])[:, None, None, :]  # (B, 1, 1, T)
        float_mask = torch.zeros(mask.shape).masked_fill(~mask, float("-inf"))
        steps = contenders(q, k, v, mask, float_mask, compiled)
        reference = steps["attend"]()
        for name, step in steps.items():  # agreement, and a warm-up (the compile)
            torch.testing.assert_close(step(), reference, rtol=1e-4, atol=1e-5, msg=name)
        times = round_robin(steps, args.rounds, torch.device("cpu"))
        base = median(times["attend"])
        for name, ts in times.items():
            m = median(ts)
            rows.append([what, f"{b} x {t}", name, f"{m * 1e6:.0f}", f"{base / m:.2f}x"])
            results.append({"shape": what, "rows": b, "keys": t, "engine": name, "median_s": m})
    print(environment(torch.device("cpu")))
    print(format_table(["shape", "rows x keys", "engine", "us per call", "vs attend"], rows))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"args": vars(args), "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
