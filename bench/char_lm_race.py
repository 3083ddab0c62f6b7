"""Character LM on Tiny Shakespeare: attnkit against nanoGPT's own CPU recipe, same wall time.

nanoGPT's README gives a CPU recipe (4 layers, 4 heads, d 128, context 64,
batch 12, 2000 iterations, dropout 0); this script runs it from a nanoGPT
checkout (``--nanogpt DIR``: a snapshot of github.com/karpathy/nanoGPT whose
``data/shakespeare_char`` has been prepared with its ``prepare.py``), times
the whole process, and reads its last reported validation loss. Then it runs
``attnkit train`` with ``--config`` and ``train.max_minutes`` set so that the
whole attnkit process takes no longer than nanoGPT's did, and scores the
result on the same validation split (the last 10% of the characters; nanoGPT
splits the same way) with ``attnkit evaluate --context 64`` semantics: blocks
of the model's context, every block of the split (nanoGPT's figure is its own
estimate from ``eval_iters`` random blocks).

Usage:
  python bench/char_lm_race.py --nanogpt /tmp/nanogpt \\
      --data ../shared/data/tinyshakespeare/input.txt --json /tmp/race.json

Without ``--nanogpt``, ``--seconds`` gives the budget (e.g. the 114 s measured before).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from common import environment

REPO = Path(__file__).resolve().parents[1]
NANOGPT_RECIPE = [
    "config/train_shakespeare_char.py", "--device=cpu", "--compile=False", "--eval_iters=20",
    "--log_interval=1", "--block_size=64", "--batch_size=12", "--n_layer=4", "--n_head=4",
    "--n_embd=128", "--max_iters=2000", "--lr_decay_iters=2000", "--dropout=0.0",
]  # fmt: skip
# Seconds attnkit needs besides training: start-up, reading and encoding the text,
# the final validation, writing the checkpoint. Measured, then kept as a margin.
OVERHEAD_S = 12.0


def run_nanogpt(directory: Path, out: Path) -> dict[str, float]:
    command = [sys.executable, "train.py", *NANOGPT_RECIPE, f"--out_dir={out}"]
    start = time.perf_counter()
    result = subprocess.run(command, cwd=directory, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - start
    found = re.findall(r"step (\d+): train loss ([\d.]+), val loss ([\d.]+)", result.stdout)
    step, train, val = found[-1]
    return {"wall_s": wall, "steps": int(step), "train_loss": float(train), "val_loss": float(val)}


def run_attnkit(config: Path, data: Path, seconds: float, out: Path, extra: list[str]) -> dict:
    minutes = max(0.1, (seconds - OVERHEAD_S) / 60.0)
    command = [sys.executable, "-m", "attnkit", "train", "--config", str(config), "--out", str(out),
               "--set", f"data.dir={data.parent}", "--set", f"data.text={data.name}",
               "--set", f"train.max_minutes={minutes:.4f}", "--no-progress", *extra]  # fmt: skip
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - start
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    text = data.read_text(encoding="utf-8")
    valid = out / "valid_split.txt"
    valid.write_text(text[int(len(text) * 0.9) :], encoding="utf-8")  # nanoGPT's split
    scored = subprocess.run(
        [sys.executable, "-m", "attnkit", "evaluate", "--checkpoint", str(out), "--text",
         str(valid), "--json"], capture_output=True, text=True, check=True,
    )  # fmt: skip
    full = json.loads(scored.stdout)
    return {"wall_s": wall, "steps": summary["step"], "val_loss_during": summary["valid"]["loss"],
            "val_loss": full["loss"], "budget_minutes": minutes}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--nanogpt", type=Path, help="a prepared nanoGPT checkout")
    p.add_argument("--seconds", type=float, default=114.0, help="budget without --nanogpt")
    p.add_argument("--data", type=Path, required=True, help="Tiny Shakespeare input.txt")
    p.add_argument("--config", type=Path, default=REPO / "configs/tinyshakespeare_cpu_race.yaml")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--json", type=Path, help="also write the figures as JSON")
    args = p.parse_args()
    extra = [x for kv in args.overrides for x in ("--set", kv)]
    rows: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        if args.nanogpt is not None:
            rows["nanoGPT (README CPU recipe)"] = run_nanogpt(args.nanogpt, Path(tmp) / "nano")
            seconds = rows["nanoGPT (README CPU recipe)"]["wall_s"]
        else:
            seconds = args.seconds
        rows["attnkit"] = run_attnkit(args.config, args.data.resolve(), seconds,
                                      Path(tmp) / "attnkit", extra)  # fmt: skip
    env = environment(torch.device("cpu"))
    print(json.dumps(env))
    print("| engine | wall s | steps | val loss |")
    print("|---|---|---|---|")
    for name, r in rows.items():
        print(f"| {name} | {r['wall_s']:.0f} | {r['steps']} | {r['val_loss']:.3f} |")
    if args.json:
        args.json.write_text(json.dumps({"environment": env, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
