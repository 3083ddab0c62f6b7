"""Swin against ViT at equal CPU time, and an RBF SVC, on the bundled image sets (issue 27).

For each data set (scikit-learn's ``digits``; scikit-image's ``lfw_subset``, faces
vs non-faces) and each seed, trains the ViT config and the Swin config through the
one trainer with the SAME time budget (``train.max_minutes``; the cosine schedule
ends with the budget, so each run ends annealed whatever its speed), one after the
other, then fits scikit-learn's ``SVC`` (RBF, its defaults but ``C``) on the same
training pixels; all are scored on the same held-out split.

    python experiments/image_models.py --minutes 0.5 --seeds 1 2 --json images.json
    python experiments/image_models.py --datasets lfw_subset --minutes 0.2

Prints one table row per (data set, model): mean held-out accuracy over the seeds,
each seed's, steps and seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))

from vit_digits import cpu_model, train_svc, train_vit  # noqa: E402

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
MODELS: dict[str, dict[str, Path]] = {
    "digits": {"vit": CONFIGS / "vit_digits.yaml", "swin": CONFIGS / "swin_digits.yaml"},
    "lfw_subset": {"vit": CONFIGS / "vit_lfw.yaml", "swin": CONFIGS / "swin_lfw.yaml"},
}


def budget_overrides(minutes: float, seed: int) -> list[str]:
    """The same time budget for every model: the cosine ends when it runs out."""
    return [
        f"train.max_minutes={minutes}", "train.max_steps=1000000", "train.decay_to_budget=true",
        "train.schedule=cosine", "train.warmup_fraction=0.05", f"train.seed={seed}",
        "train.eval_every=1000000", "train.save_every=0",
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--datasets", nargs="+", default=list(MODELS), choices=list(MODELS))
    p.add_argument("--models", nargs="+", default=["vit", "swin"], choices=["vit", "swin"])
    p.add_argument("--minutes", type=float, default=0.5, help="training budget per run")
    p.add_argument("--seeds", type=int, nargs="+", default=[1])
    p.add_argument("--svc-c", type=float, default=10.0)
    p.add_argument("--out", type=Path, default=Path("runs/image_models"))
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="more overrides for every run (e.g. train.max_steps=5 for a smoke test)",
    )
    p.add_argument("--json", type=Path, help="also write the results here")
    args = p.parse_args(argv)

    rows: list[dict[str, Any]] = []
    for dataset in args.datasets:
        task = None
        for model in args.models:
            runs = []
            for seed in args.seeds:
                overrides = budget_overrides(args.minutes, seed) + args.overrides
                out = args.out / f"{dataset}_{model}_s{seed}"
                result, task = train_vit(MODELS[dataset][model], overrides, out)
                runs.append(result)
            accuracies = [r["held_out_accuracy"] for r in runs]
            rows.append({"dataset": dataset, "model": model, "runs": runs,
                         "mean_accuracy": sum(accuracies) / len(accuracies)})  # fmt: skip
        assert task is not None and task.valid is not None
        svc = train_svc(task.train, task.valid, args.svc_c)
        rows.append({"dataset": dataset, "model": "svc", "runs": [svc],
                     "mean_accuracy": svc["held_out_accuracy"]})  # fmt: skip
        print(f"{dataset}: {len(task.train)} training / {len(task.valid)} held-out images")

    print("\n| data | model | held-out accuracy (mean) | per seed | steps | seconds |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        seeds = ", ".join(f"{r['held_out_accuracy']:.4f}" for r in row["runs"])
        steps = ", ".join(str(r.get("steps", "")) for r in row["runs"])
        secs = ", ".join(str(r["train_seconds"]) for r in row["runs"])
        print(f"| {row['dataset']} | {row['model']} | {row['mean_accuracy']:.4f} | {seeds} | "
              f"{steps} | {secs} |")  # fmt: skip
    result = {"rows": rows, "minutes": args.minutes, "seeds": args.seeds, "cpu": cpu_model(),
              "cpus": os.cpu_count(), "torch": torch.__version__}  # fmt: skip
    print(f"\n{result['cpu']}, {args.minutes} min per run, seeds {args.seeds}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return result


if __name__ == "__main__":
    main()
