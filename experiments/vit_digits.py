"""The digits ViT through the trainer (``configs/vit_digits.yaml``) against an SVC, one run.

Trains ``task: image_classification`` with the one trainer (the same code as
``attnkit train --config configs/vit_digits.yaml``), times ``fit`` (periodic
evaluations and checkpoint writes included), then fits scikit-learn's
``SVC`` (RBF kernel, ``C=--svc-c``, otherwise its defaults) on the same
1,438 training images' 64 pixels and scores both on the same 359 held out.

    python experiments/vit_digits.py --out runs/vit_digits_vs_svc --json result.json
    python experiments/vit_digits.py --set train.max_steps=100   # any config key

The run directory is a normal one (``attnkit evaluate --checkpoint OUT --images
digits`` reads it). An existing ``--out`` is replaced.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from attnkit.data.images import ImageSet  # noqa: E402
from attnkit.training.loop import Trainer  # noqa: E402
from attnkit.training.runconfig import load_run_config  # noqa: E402
from attnkit.training.tasks import task_from_run  # noqa: E402

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "vit_digits.yaml"


def train_vit(config: Path, overrides: list[str], out: Path) -> tuple[dict[str, Any], Any]:
    """Train the config's ViT into ``out``; its held-out accuracy, time and size."""
    run = load_run_config(config, overrides)
    task = task_from_run(run)
    if out.exists():
        shutil.rmtree(out)
    trainer = Trainer(run, task, out, progress=False)
    start = time.perf_counter()
    summary = trainer.fit()
    seconds = time.perf_counter() - start
    valid = summary["valid"]
    return {
        "held_out_accuracy": valid.get("accuracy"),
        "held_out_nll": valid.get("nll"),
        "steps": summary["step"],
        "epochs": task.progress()["epoch"],
        "stopped_by_max_minutes": summary["stopped_early"],
        "train_seconds": round(seconds, 1),
        "parameters": sum(p.numel() for p in trainer.model.parameters()),
        "threads": torch.get_num_threads(),
        "model": task.model_config.to_dict(),
    }, task


def train_svc(train: ImageSet, test: ImageSet, c: float) -> dict[str, Any]:
    """An RBF ``SVC`` on the flattened pixels of the same split."""
    from sklearn.svm import SVC

    start = time.perf_counter()
    svc = SVC(C=c).fit(train.images.flatten(1).numpy(), train.labels.numpy())
    accuracy = svc.score(test.images.flatten(1).numpy(), test.labels.numpy())
    return {"C": c, "held_out_accuracy": float(accuracy),
            "train_seconds": round(time.perf_counter() - start, 2)}  # fmt: skip


def cpu_model() -> str:
    """``lscpu``'s model name (from /proc/cpuinfo), or the platform's processor string."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--config", type=Path, default=CONFIG)
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--out", type=Path, default=Path("runs/vit_digits_vs_svc"))
    p.add_argument("--svc-c", type=float, default=10.0)
    p.add_argument("--json", type=Path, help="also write the results here")
    args = p.parse_args(argv)

    load = os.getloadavg()[0]
    vit, task = train_vit(args.config, args.overrides, args.out)
    if task.valid is None:
        raise SystemExit("vit_digits: the config holds nothing out (data.valid_fraction: 0)")
    svc = train_svc(task.train, task.valid, args.svc_c)
    result = {
        "vit": vit,
        "svc": svc,
        "split": {"train": len(task.train), "held_out": len(task.valid)},
        "config": str(args.config),
        "overrides": args.overrides,
        "cpu": cpu_model(),
        "cpus": os.cpu_count(),
        "load_average": [round(load, 2), round(os.getloadavg()[0], 2)],
        "torch": torch.__version__,
    }
    stop = ", stopped by train.max_minutes" if vit["stopped_by_max_minutes"] else ""
    print(f"ViT  held-out {vit['held_out_accuracy']:.4f}  ({vit['parameters']:,} parameters, "
          f"{vit['steps']} steps = {vit['epochs']:.1f} epochs in {vit['train_seconds']} s, "
          f"{vit['threads']} thread(s){stop})")  # fmt: skip
    print(f"SVC  held-out {svc['held_out_accuracy']:.4f}  (RBF, C={svc['C']}, "
          f"{svc['train_seconds']} s)")  # fmt: skip
    print(
        f"split {len(task.train)} / {len(task.valid)}; {result['cpu']}, load average "
        f"{result['load_average'][0]} -> {result['load_average'][1]} on {result['cpus']} CPUs"
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return result


if __name__ == "__main__":
    main()
