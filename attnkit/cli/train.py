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
  attnkit train --config configs/multi30k_de_en.yaml --set data.dir=data/multi30k \\
      --out runs/de_en
  attnkit train --config configs/tinyshakespeare_char.yaml \\
      --set data.dir=data/tinyshakespeare --out runs/shakespeare
  attnkit train --config configs/vit_digits.yaml --out runs/vit_digits

Start from a checkpoint (transfer learning) with --init CKPT: any attnkit run
or checkpoint directory, or what 'attnkit import' wrote. The architecture and
the tokenizer come from CKPT (a model key that would change them is an error;
dropout may change), the weights are CKPT's, the optimizer, schedule and step
count start fresh; the run records CKPT's path and sha256 in run.json and in
every checkpoint. A task's new head (a classifier's labels) starts fresh.

  attnkit import --from hf path/to/all-MiniLM-L6-v2 --out runs/minilm
  attnkit train --config configs/sst2_minilm.yaml --init runs/minilm --out runs/sst2

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
from typing import Any

from attnkit.cli.common import (
    add_device_argument,
    add_set_argument,
    check_out_dir,
    check_training_fits,
    checkpoint_inputs,
    lock_run_dir,
    open_run_dir,
)
from attnkit.errors import UsageError
from attnkit.outputs import write_text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="YAML run config (see configs/)")
    add_set_argument(parser)
    parser.add_argument(
        "--init",
        metavar="CKPT",
        help="start from this checkpoint's weights, architecture and tokenizer "
        "(a run or checkpoint directory, or an import); a fresh optimizer and schedule",
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
    from attnkit.training.init import count_parameters
    from attnkit.training.loop import Trainer
    from attnkit.training.runconfig import LM_TASKS, load_run_config
    from attnkit.training.tasks import task_from_run

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
        initial = initial_for_run(run_config, out, init=args.init, resume=args.resume)
        # A resumed run reads with its own vocabulary (an --init run's comes with `initial`).
        saved_tokenizer = load_tokenizer(out) if args.resume and initial is None else None
        task = task_from_run(
            run_config, saved_tokenizer, initial, log=print if dist.is_main else None
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
        trainable, total = count_parameters(trainer.model)
        if dist.is_main:
            write_text(out / "run.json", run_config.to_json() + "\n")
            if initial is not None and not args.resume:
                # the task's: an encoder warm-starts an encoder-decoder (its weights, mapped)
                started = getattr(task, "initial", None) or initial
                print(f"starting from {initial.source.describe()}"
                      f"{_fresh_note(trainer.model, started)}")  # fmt: skip
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
        print(json.dumps({"out": str(out), **summary, "parameters": total,
                          "trainable_parameters": trainable}))  # fmt: skip
    return 0


def initial_for_run(run_config: Any, out: Path, *, init: str | None, resume: bool) -> Any:
    """The checkpoint a run starts from (``attnkit.training.init.Initial``), or ``None``.

    A new run: ``--init`` (else the config's ``init``), whose source is then
    recorded in ``run_config.init``. ``--resume`` of a run that started from a
    checkpoint: the run's own latest checkpoint (its model and tokenizer; the
    weights are the resume's), with the recorded source kept; ``--init`` must
    then name the same weights.
    """
    from attnkit.checkpoints.adapters import read_adapter_info
    from attnkit.checkpoints.rundir import latest_checkpoint
    from attnkit.training.init import load_initial, recorded_init
    from attnkit.training.runconfig import InitConfig

    if resume:
        latest = latest_checkpoint(out)
        record = recorded_init(latest) if latest is not None else None
        if record is None:
            if init is not None:
                raise UsageError(f"--init: {out} did not start from a checkpoint; --resume "
                                 "continues it as it is (drop --init)")  # fmt: skip
            run_config.init = None
            return None
        if init is not None:
            from attnkit.checkpoints.digest import weights_digest
            from attnkit.checkpoints.files import MODEL_FILE
            from attnkit.checkpoints.rundir import resolve_checkpoint

            given = weights_digest(resolve_checkpoint(init) / MODEL_FILE)
            if not given.matches(record.get("sha256")):
                where = record.get("checkpoint")
                raise UsageError(f"--init {init}: {out} started from other weights ({where}); "
                                 "drop --init to resume it")  # fmt: skip
        run_config.init = InitConfig(**record)
        assert latest is not None  # a record implies a checkpoint
        if read_adapter_info(latest) is not None:  # LoRA: adapters alone; the base's weights
            return load_initial(record["checkpoint"], expected_sha256=record.get("sha256"))
        return load_initial(latest)
    if init is not None:
        run_config.init = InitConfig(path=init)
    if run_config.init is None:
        return None
    initial = load_initial(run_config.init.path, expected_sha256=run_config.init.sha256)
    run_config.init = InitConfig(**initial.source.to_dict())
    return initial


def _fresh_note(model: Any, initial: Any) -> str:
    """``"; freshly initialised: classifier.classifier"``: the modules (not their
    parents: an imported BERT supplies the pooler of the head) the checkpoint did not supply."""
    from attnkit.adapters import base_name

    state = initial.state
    named = ((base_name(name), t) for name, t in model.state_dict().items())  # LoRA: the base's
    fresh = sorted({name.rsplit(".", 1)[0] for name, t in named if name is not None
                    and (name not in state or state[name].shape != t.shape)})  # fmt: skip
    return f"; freshly initialised: {', '.join(fresh)}" if fresh else ""
