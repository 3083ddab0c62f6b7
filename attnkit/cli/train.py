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
  attnkit train --config multi30k_de_en --set data.dir=data/multi30k --out runs/de_en
  attnkit train --config tinyshakespeare_char --set data.dir=data/tinyshakespeare \\
      --out runs/shakespeare
  attnkit train --config vit_digits --out runs/vit_digits
  attnkit train --config my_run.yaml

--config is a YAML file, or the name of a recipe that ships with attnkit
('attnkit config list'; 'attnkit config show NAME' prints one to start from).

Start from a checkpoint (transfer learning) with --init CKPT: any attnkit run
or checkpoint directory, what 'attnkit import' wrote, or a Hugging Face Hub
model by name, hf:ORG/NAME[@REVISION] (imported once into attnkit's cache, then
reused). The architecture and the tokenizer come from CKPT (a model key that
would change them is an error; dropout may change), the weights are CKPT's, the
optimizer, schedule and step count start fresh; the run records CKPT's path
(a Hub name with its commit) and sha256 in run.json and in every checkpoint. A
task's new head (a classifier's labels) starts fresh.

  attnkit train --config sst2_minilm --init hf:sentence-transformers/all-MiniLM-L6-v2 \\
      --set data.dir=data/sst2 --out runs/sst2

Every key can be overridden with --set SECTION.KEY=VALUE (repeatable). Training
shows a progress bar (loss, lr, tokens/s, ETA), appends metrics to
OUT/metrics.jsonl, redraws OUT/loss.png, and writes checkpoints under
OUT/checkpoints/. An existing OUT is never overwritten silently: pass --resume
to continue from its latest checkpoint, or --overwrite to start over.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from attnkit import jsonio
from attnkit.cli.common import (
    add_device_argument,
    add_set_argument,
    check_out_dir,
    check_training_fits,
    checkpoint_inputs,
    lock_run_dir,
    named_checkpoint,
    open_run_dir,
    pinned_checkpoint,
)
from attnkit.output_paths import write_text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", help="YAML run config, or a packaged recipe's name (attnkit config list)"
    )
    add_set_argument(parser)
    parser.add_argument(
        "--init",
        metavar="CKPT",
        help="start from this checkpoint's weights, architecture and tokenizer "
        "(a run or checkpoint directory, an import, or hf:ORG/NAME[@REVISION]: a Hugging "
        "Face Hub model, imported once); a fresh optimizer and schedule",
    )
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
    from attnkit.training.runconfig import LM_TASKS, load_run_config
    from attnkit.training.tasks import task_from_run
    from attnkit.training.warm_start import count_parameters, warm_start_for_run

    overrides = list(args.overrides)
    if args.no_fast:  # after the user's --set, so the flag wins
        overrides += ["train.fast=off", "train.compile=false"]
    run_config = load_run_config(args.config, overrides)
    name = Path(args.config).stem if args.config else "run"
    out = Path(args.out or Path("runs") / name)
    # --overwrite empties OUT: it must not hold the config, the data or --init's checkpoint;
    # a new run is not written inside that checkpoint (beside it in its run is fine).
    inputs = [p for p in (args.config, run_config.data.dir, args.init) if p]
    checkpoints = checkpoint_inputs(args.init) if args.init else []
    dist = init_distributed(args.device)  # under torchrun: join the group, one device per rank
    # Check everything (out dir, data, tokenizer, model) before touching the disk.
    check_out_dir(out, resume=args.resume, overwrite=args.overwrite, inputs=inputs,
                  checkpoints=checkpoints)  # fmt: skip
    # Rank 0 holds OUT's lock for the whole run, taken before anything in OUT changes.
    lock = dist.on_main(lock_run_dir, out)
    try:
        start = warm_start_for_run(run_config, out, init=args.init, resume=args.resume,
                                   resolve=named_checkpoint, pin=pinned_checkpoint)  # fmt: skip
        if run_config.train.lora is not None and start is not None:  # before data is read
            from attnkit.adapters.sizes import check_rank_for_config

            check_rank_for_config(start.config, run_config.train.lora, field="train.lora")
        # A resumed run reads with its own vocabulary (an --init run's comes with `start`).
        saved_tokenizer = load_tokenizer(out) if args.resume and start is None else None
        task = task_from_run(
            run_config, saved_tokenizer, start, log=print if dist.is_main else None
        )
        # Before the model is built; an LM batch is max_tokens whatever the text's length.
        batch_tokens = run_config.train.max_tokens if run_config.task in LM_TASKS else 0
        check_training_fits(task.model_config, dist.device, batch_tokens=batch_tokens)
        trainer = Trainer(
            run_config,
            task,
            out,
            device=args.device,
            progress=not args.no_progress,
            distributed=dist,
            callbacks=callbacks,
        )
        lock = dist.on_main(
            open_run_dir, out, resume=args.resume, overwrite=args.overwrite, inputs=inputs,
            checkpoints=checkpoints, lock=lock,
        )  # fmt: skip
        if args.resume and trainer.resume() and dist.is_main:
            print(f"resuming {out} from step {trainer.step}")
        if lock is not None:  # accepted: from here on the run writes (its PID first)
            lock.announce()
        trainable, total = count_parameters(trainer.model)
        if dist.is_main:
            write_text(out / "run.json", run_config.to_json() + "\n")
            if start is not None and not args.resume:
                # the task's own: an encoder warm-starts an encoder-decoder (its weights, mapped)
                started = getattr(task, "start", None) or start
                print(f"starting from {started.describe()}")
            if trainer.weights.describe():
                print(trainer.weights.describe())
            share = "" if trainable == total else f" ({trainable / 1e6:.2f}M trainable)"
            print(f"{run_config.task}: {task.describe()}, {total / 1e6:.2f}M parameters{share}, "
                  f"device {trainer.device}")  # fmt: skip
        summary = trainer.fit()
    finally:
        if lock is not None:
            lock.release()
    if dist.is_main:
        print(jsonio.dumps({"out": str(out), **summary, "parameters": total,
                            "trainable_parameters": trainable}))  # fmt: skip
    return 0
