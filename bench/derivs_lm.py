"""Issue 17's language-model measurements on tiny Shakespeare: equal wall-clock rows.

* ``moe``: ``configs/shakespeare_moe.yaml`` (4 experts of d_ff 256, top-2)
  against the same model with a dense d_ff 512 FFN: the same active FFN
  parameters per token.
* ``long``: ``configs/shakespeare_long.yaml`` at context 1,024: dense, local
  (window 128) and linear attention.

Every row is ``attnkit train`` in its own subprocess with ``train.max_minutes``
(the same for every row), run one after another; then the row's
``metrics.jsonl`` gives its steps, its validation loss (evaluated once, when
time ran out, on the whole validation split), its training tokens/s (the
median over log windows, the first window, which holds the warm-up, left out)
and, for MoE, expert utilisation (mean over the run's train records) and
drop rate. Prints a Markdown table and writes ``OUT/<which>_result.json``.

Wall-clock rows on a shared machine mix the rows' speed with whatever else
ran meanwhile, so ``--speed ROUNDS`` first times the rows' training steps
round-robin in one process (``bench/common.py``: one step of each row per
round, after two warm-up steps), which hits every row alike, and adds the
median ms/step and tokens/s to the table.

    python bench/derivs_lm.py moe --data /work/shared/data/tinyshakespeare
    python bench/derivs_lm.py long --data /work/shared/data/tinyshakespeare --minutes 4
    python bench/derivs_lm.py moe --data ... --speed 20 --minutes 0   # step timing only

On a shared machine, wrap it in ``flock /tmp/attnkit-cpu.lock`` and read the
tokens/s as provisional.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from common import REPO, environment, format_table, median, round_robin

ROWS: dict[str, tuple[str, dict[str, list[str]]]] = {
    "moe": (
        "configs/shakespeare_moe.yaml",
        {
            "dense (d_ff 512)": ["model.ffn=dense", "model.d_ff=512"],
            "moe (4 x d_ff 256, top-2)": [],
        },
    ),
    "long": (
        "configs/shakespeare_long.yaml",
        {
            "dense": [],
            "local (window 128)": ["model.attention=local", "model.attention_window=128"],
            "linear": ["model.attention=linear"],
        },
    ),
}


def parameters(run_dir: Path) -> tuple[int, int]:
    """``(total, active per token)`` parameters of the run's model (MoE: top-k of N experts)."""
    sys.path.insert(0, str(REPO))
    from attnkit.blocks.moe import MoEFeedForward
    from attnkit.checkpoints import load_model

    model = load_model(run_dir, "cpu").model
    total = sum(p.numel() for p in model.parameters())
    idle = 0
    for module in model.modules():
        if isinstance(module, MoEFeedForward):
            per_expert = sum(p.numel() for p in module.experts[0].parameters())
            idle += (module.num_experts - module.top_k) * per_expert
    return total, total - idle


def summarise(run_dir: Path, wall: float) -> dict[str, Any]:
    lines = (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines]
    train = [r for r in records if r["split"] == "train"]
    valid = [r for r in records if r["split"] == "valid"][-1]
    windows = [r["tokens_per_s"] for r in train[1:-1]] or [r["tokens_per_s"] for r in train]
    total, active = parameters(run_dir)
    row: dict[str, Any] = {
        "steps": train[-1]["step"],
        "valid_loss": valid["loss"],
        "valid_ppl": valid["ppl"],
        "last_train_loss": train[-1]["nll"],
        "tokens_per_s": statistics.median(windows),
        "parameters": total,
        "active_parameters": active,
        "wall_s": round(wall, 1),
    }
    experts = sorted(k for k in train[-1] if k.startswith("expert_util_"))
    if experts:
        row["utilisation_mean"] = [statistics.mean(r[k] for r in train) for k in experts]
        row["utilisation_last"] = [train[-1][k] for k in experts]
        row["drop_rate_mean"] = statistics.mean(r["moe_drop_rate"] for r in train)
        row["balance_loss_last"] = train[-1]["moe_balance_loss"]
    return row


def run_row(config: str, sets: list[str], out: Path, data: str, minutes: float) -> float:
    argv = [sys.executable, "-m", "attnkit", "train", "--config", str(REPO / config),
            "--out", str(out), "--overwrite", "--no-progress",
            "--set", f"data.dir={data}", "--set", f"train.max_minutes={minutes}"]  # fmt: skip
    for item in sets:
        argv += ["--set", item]
    start = time.perf_counter()
    subprocess.run(argv, check=True, cwd=REPO)
    return time.perf_counter() - start


def step_speed(
    config: str, rows: dict[str, list[str]], data: str, extra: list[str], rounds: int
) -> dict[str, dict[str, float]]:
    """Median seconds per training step of each row, timed round-robin in this process."""
    import torch

    from attnkit.training.loop import Trainer
    from attnkit.training.runconfig import load_run_config
    from attnkit.training.tasks import task_from_run

    steps = {}
    tokens = {}
    for name, sets in rows.items():
        run = load_run_config(REPO / config, [f"data.dir={data}", *sets, *extra])
        trainer = Trainer(run, task_from_run(run), Path("/nonexistent"), device="cpu",
                          progress=False)  # fmt: skip
        for _ in range(2):  # warm-up
            trainer.train_step()
        steps[name] = trainer.train_step
        tokens[name] = trainer.task.batch_size * trainer.task.model_config.max_len
    times = round_robin(steps, rounds, torch.device("cpu"))
    return {name: {"ms_per_step": 1e3 * median(t), "tokens_per_s": tokens[name] / median(t)}
            for name, t in times.items()}  # fmt: skip


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("which", choices=sorted(ROWS))
    p.add_argument("--data", required=True, help="the folder holding input.txt")
    p.add_argument("--minutes", type=float, default=4.0, help="train.max_minutes of every row")
    p.add_argument("--out", type=Path, default=Path("runs/derivs"))
    p.add_argument("--set", dest="extra", action="append", default=[], help="for every row")
    p.add_argument(
        "--speed",
        type=int,
        default=0,
        metavar="ROUNDS",
        help="first time the rows' steps round-robin for ROUNDS rounds",
    )
    args = p.parse_args(argv)
    config, rows = ROWS[args.which]
    env = environment(__import__("torch").device("cpu"))
    results: dict[str, Any] = {"config": config, "minutes": args.minutes, "env": env, "rows": {}}
    if args.speed:
        results["speed"] = step_speed(config, rows, args.data, args.extra, args.speed)
    for i, (name, sets) in enumerate(rows.items()):
        if args.minutes <= 0:
            break
        out = args.out / f"{args.which}_{i}"
        wall = run_row(config, sets + args.extra, out, args.data, args.minutes)
        results["rows"][name] = {"sets": sets, **summarise(out, wall)}
    results["load_average_end"] = environment(__import__("torch").device("cpu"))["load average"]
    table = []
    for name, r in results["rows"].items():
        util = "-"
        if "utilisation_mean" in r:
            util = " / ".join(f"{u:.2f}" for u in r["utilisation_mean"])
            util += f" (drop {r['drop_rate_mean']:.3f})"
        table.append([name, f"{r['parameters'] / 1e6:.2f}M / {r['active_parameters'] / 1e6:.2f}M",
                      str(r["steps"]), f"{r['tokens_per_s']:,.0f}", f"{r['valid_loss']:.4f}",
                      f"{r['valid_ppl']:.3f}", util])  # fmt: skip
    headers = ["row", "params total / active", "steps", "train tok/s", "valid loss", "valid ppl",
               "expert utilisation (mean over run)"]  # fmt: skip
    print("\n".join(f"{k}: {v}" for k, v in env.items()))
    print(f"config: {config}, train.max_minutes={args.minutes} per row, extra sets {args.extra}")
    if table:
        print(format_table(headers, table))
    if args.speed:
        speed = [[name, f"{v['ms_per_step']:.0f}", f"{v['tokens_per_s']:,.0f}"]
                 for name, v in results["speed"].items()]  # fmt: skip
        print(f"round-robin step timing, {args.speed} rounds (median):")
        print(format_table(["row", "ms/step", "train tok/s"], speed))
    print(f"load average at the end: {results['load_average_end']}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.which}_result.json").write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main()
