"""``--precision fp32``'s choice on this machine: oneDNN-packed vs plain linears, per row count.

Loads a checkpoint (or builds a random ``--preset`` Transformer), and for each
``--rows`` runs ``attnkit.kernels.fp32_choice.measure``: one pass through every
linear ``quantize_model`` converts, plain then packed, at that many rows (the
warm-up, then the best of two). Prints the ratio (plain time / packed time: > 1
means packed is faster) and what ``--precision fp32`` would pick, with the CPU.

    python bench/fp32_linears.py --checkpoint runs/smollm2 --rows 1,4,32,128
    python bench/fp32_linears.py --preset base --rows 1,32,128 --threads 2
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from common import environment, format_table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from attnkit.kernels import fp32_choice  # noqa: E402
from attnkit.quantize.model import convertible_linears  # noqa: E402


def load(args: argparse.Namespace) -> torch.nn.Module:
    if args.checkpoint:
        from attnkit.checkpoints import load_model

        return load_model(args.checkpoint, "cpu").model
    from engines import build_model

    return build_model(8000, args.preset)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--checkpoint", type=Path, help="an attnkit checkpoint or run directory")
    p.add_argument("--preset", default="base", help="without --checkpoint: a random Transformer")
    p.add_argument("--rows", default="1,4,32,128", help="comma-separated row counts")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", type=Path, help="also write the rows here")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    linears = convertible_linears(load(args).eval())
    params = sum(m.weight.numel() for m in linears)
    rows = []
    for n in (int(x) for x in args.rows.split(",")):
        choice = fp32_choice.measure(linears, n)
        assert choice.speedup is not None
        rows.append({"rows": n, "plain_over_packed": round(choice.speedup, 3),
                     "pick": "packed" if choice.packed else "plain",
                     "measured_s": round(choice.seconds, 2)})  # fmt: skip
    env = environment(torch.device("cpu"))
    print(json.dumps({**env, "linears": len(linears), "weights": params, "rows": rows}))
    print(f"{len(linears)} linears, {params / 1e6:.1f}M weights; {env}")
    headers = ["rows", "plain time / packed time", "--precision fp32 picks", "measured in s"]
    print(format_table(headers, [[str(v) for v in r.values()] for r in rows]))
    if args.json:
        args.json.write_text(json.dumps({**env, "rows": rows}, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
