"""Train a model from a YAML run config.

The config's ``task`` picks the model and the objective: ``translation`` (an
encoder-decoder on parallel text, the default), ``lm`` (a GPT-style
decoder-only model on one text file), ``mlm`` (a BERT-style encoder-only
masked LM on one text file) or ``image_classification`` (a Vision
Transformer on scikit-learn's digits or a folder of labelled images). Every
task gets the same trainer: gradient accumulation, precision, checkpoints
with keep_last, resume, torchrun, and the auxiliary losses and utilisation
log of mixture-of-experts models.

Examples:
  attnkit train --config configs/multi30k_de_en.yaml --set data.dir=../shared/data/multi30k \\
      --out runs/de_en
  attnkit train --config configs/tinyshakespeare_char.yaml \\
      --set data.dir=../shared/data/tinyshakespeare --out runs/shakespeare
  attnkit train --config configs/vit_digits.yaml --out runs/vit_digits

Any key can be overridden with --set SECTION.KEY=VALUE (repeatable). Training
shows a progress bar (loss, lr, tokens/s, ETA), appends metrics to
OUT/metrics.jsonl, redraws OUT/loss.png, and writes checkpoints under
OUT/checkpoints/. An existing OUT is never overwritten silently: pass --resume
to continue from its latest checkpoint, or --overwrite to start over.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from attnkit.cli.common import (
    add_device_argument,
    add_set_argument,
    check_out_dir,
    prepare_out_dir,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="YAML run config (see configs/)")
    add_set_argument(parser)
    parser.add_argument("--out", help="run directory (default: runs/<config name>)")
    parser.add_argument("--resume", action="store_true", help="continue the run in --out")
    parser.add_argument("--overwrite", action="store_true", help="replace the run in --out")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument(
        "--no-fast",
        action="store_true",
        help="plain eager training, for debugging: no torch.compile, no chunked loss, no "
        "fused optimizer (same as --set train.fast=off --set train.compile=false; "
        "train.fast=auto turns them on for CUDA only)",
    )
    add_device_argument(parser)


def run(args: argparse.Namespace, *, callbacks: Sequence = ()) -> int:
    """``attnkit train``; ``callbacks`` reach the trainer (tests crash runs with them)."""
    from attnkit.checkpoints.loading import load_tokenizer
    from attnkit.training.distributed import init_distributed
    from attnkit.training.loop import Trainer
    from attnkit.training.runconfig import load_run_config
    from attnkit.training.tasks import task_from_run

    overrides = list(args.overrides)
    if args.no_fast:  # after the user's --set, so the flag wins
        overrides += ["train.fast=off", "train.compile=false"]
    run_config = load_run_config(args.config, overrides)
    name = Path(args.config).stem if args.config else "run"
    out = Path(args.out or Path("runs") / name)
    dist = init_distributed(args.device)  # under torchrun: join the group, one device per rank
    # Check everything (out dir, data, tokenizer, model) before touching the disk.
    check_out_dir(out, resume=args.resume, overwrite=args.overwrite)
    saved_tokenizer = load_tokenizer(out) if args.resume else None  # the run's own vocabulary
    task = task_from_run(run_config, saved_tokenizer, log=print if dist.is_main else None)
    trainer = Trainer(
        run_config,
        task,
        out,
        device=args.device,
        progress=not args.no_progress,
        distributed=dist,
        callbacks=callbacks,
    )
    dist.on_main(prepare_out_dir, out, resume=args.resume, overwrite=args.overwrite)
    if args.resume and trainer.resume() and dist.is_main:
        print(f"resuming {out} from step {trainer.step}")
    if dist.is_main:
        (out / "run.json").write_text(run_config.to_json() + "\n", encoding="utf-8")
        n = sum(p.numel() for p in trainer.model.parameters())
        print(f"{run_config.task}: {task.describe()}, {n / 1e6:.2f}M parameters, "
              f"device {trainer.device}")  # fmt: skip
    summary = trainer.fit()
    if dist.is_main:
        print(json.dumps({"out": str(out), **summary}))
    return 0
