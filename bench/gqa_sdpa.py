"""Grouped-query attention: SDPA's ``enable_gqa=True`` vs ``repeat_kv`` + SDPA.

At SmolLM2-135M's attention shapes (9 query heads, 3 kv heads, head dim 64):
decoding steps (one query over a cache) and causal prompts. Prints a Markdown
table of median microseconds per call and the largest difference between the
two outputs (expected: 0, the same kernel on the same numbers).

    python bench/gqa_sdpa.py [--threads 1] [--rounds 30] [--device cpu]
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from common import environment, format_table, median, round_robin

from attnkit.attention.gqa import repeat_kv

HEADS, KV_HEADS, HEAD_DIM = 9, 3, 64
# (batch, queries, keys, causal): decoding steps, then prompts.
SHAPES = [(1, 1, 128, False), (1, 1, 1024, False), (4, 1, 512, False), (1, 128, 128, True),
          (1, 512, 512, True)]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    n_rep = HEADS // KV_HEADS
    rows = []
    for b, tq, tk, causal in SHAPES:
        q = torch.randn(b, HEADS, tq, HEAD_DIM, device=device)
        k, v = (torch.randn(b, KV_HEADS, tk, HEAD_DIM, device=device) for _ in range(2))

        def fused(q=q, k=k, v=v, causal=causal):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)

        def repeated(q=q, k=k, v=v, causal=causal):
            k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        diff = (fused() - repeated()).abs().max().item()
        round_robin({"fused": fused, "repeated": repeated}, 3, device)  # warm-up
        times = round_robin({"fused": fused, "repeated": repeated}, args.rounds, device)
        t_fused, t_rep = median(times["fused"]) * 1e6, median(times["repeated"]) * 1e6
        name = f"B={b} Tq={tq} Tk={tk}" + (" causal" if causal else "")
        ratio = t_fused / t_rep
        rows.append([name, f"{t_fused:.1f}", f"{t_rep:.1f}", f"{ratio:.2f}", f"{diff:.1e}"])
    print(environment(device))
    print(f"threads={args.threads}, rounds={args.rounds}")
    headers = ["shape (9 q heads, 3 kv heads, d 64)", "enable_gqa us", "repeat_kv us", "ratio",
               "max diff"]  # fmt: skip
    print(format_table(headers, rows))


if __name__ == "__main__":
    main()
