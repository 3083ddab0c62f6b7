"""Train a model from a YAML run config.

The config's ``task`` picks the model and the objective: ``translation`` (an
encoder-decoder on parallel text, the default), ``lm`` (a GPT-style
decoder-only model on one text file) or ``mlm`` (a BERT-style encoder-only
masked LM on one text file).

Examples:
  attnkit train --config configs/multi30k_de_en.yaml --set data.dir=../shared/data/multi30k \\
      --out runs/de_en
  attnkit train --config configs/tinyshakespeare_char.yaml \\
      --set data.dir=../shared/data/tinyshakespeare --out runs/shakespeare

Any key can be overridden with --set SECTION.KEY=VALUE (repeatable). Training
shows a progress bar (loss, lr, tokens/s, ETA), appends metrics to
OUT/metrics.jsonl, redraws OUT/loss.png, and writes checkpoints under
OUT/checkpoints/. An existing OUT is never overwritten silently: pass --resume
to continue from its latest checkpoint, or --overwrite to start over.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from attnkit.cli.common import add_device_argument, check_out_dir, prepare_out_dir


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="YAML run config (see configs/)")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key, e.g. --set train.max_steps=1000 (repeatable)",
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


def load_parallel(run_data, split: str):
    """Pairs of one split, from ``{dir}/{split}.{lang}`` files or a TSV file."""
    from attnkit.data.readers import read_parallel, read_tsv

    files = run_data.files(split)
    if len(files) == 1:
        return read_tsv(files[0], skip_empty=run_data.skip_empty)
    return read_parallel(*files, skip_empty=run_data.skip_empty)


def run_language_model(args: argparse.Namespace, run_config, out: Path) -> int:
    """``task: lm`` or ``task: mlm``: one text file, one stack, ``train_lm``'s loop."""
    from attnkit.data.lm import load_lm_corpus
    from attnkit.errors import ConfigError, UsageError
    from attnkit.training.lm_task import language_model_from_run, lm_train_config_from_run, train_lm
    from attnkit.training.loading import load_tokenizer

    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise UsageError(
            f"task: {run_config.task} runs train in one process; run them without torchrun "
            "(torchrun is for translation)"
        )
    check_out_dir(out, resume=args.resume, overwrite=args.overwrite)
    data, tok = run_config.data, run_config.tokenizer
    if data.text is None:
        raise ConfigError(
            f"data.text: the {run_config.task} task reads one text file; "
            "set data.text (a path relative to data.dir)"
        )
    # Read and check the data before touching the output directory.
    saved_tokenizer = load_tokenizer(out) if args.resume else None  # the run's own vocabulary
    corpus = load_lm_corpus(
        Path(data.dir) / data.text,
        saved_tokenizer,
        kind=tok.kind,
        vocab_size=tok.vocab_size if tok.kind == "bpe" else None,
        valid_fraction=data.valid_fraction,
    )
    import torch

    torch.manual_seed(run_config.train.seed)  # the initial weights follow train.seed
    model = language_model_from_run(run_config, corpus.tokenizer)
    cfg = lm_train_config_from_run(run_config, model.config.max_len)
    prepare_out_dir(out, resume=args.resume, overwrite=args.overwrite)
    (out / "run.json").write_text(run_config.to_json() + "\n", encoding="utf-8")
    print(
        f"{run_config.task}: {corpus.train.numel()} training tokens, "
        f"{corpus.valid.numel()} validation tokens, vocabulary {corpus.tokenizer.vocab_size}, "
        f"{model.num_parameters() / 1e6:.1f}M parameters, {cfg.batch_size} blocks of "
        f"{model.config.max_len} tokens per batch"
    )
    summary = train_lm(
        model,
        corpus,
        out,
        cfg,
        device=args.device,
        progress=not args.no_progress,
        resume=args.resume,
    )
    print(json.dumps({"out": str(out), **summary}))
    return 0


def run(args: argparse.Namespace) -> int:
    from attnkit.training.distributed import init_distributed
    from attnkit.training.loading import load_tokenizer
    from attnkit.training.runconfig import load_run_config
    from attnkit.training.translation import TranslationTrainer, build_tokenizer

    overrides = list(args.overrides)
    if args.no_fast:  # after the user's --set, so the flag wins
        overrides += ["train.fast=off", "train.compile=false"]
    run_config = load_run_config(args.config, overrides)
    name = Path(args.config).stem if args.config else "run"
    out = Path(args.out or Path("runs") / name)
    if run_config.task in ("lm", "mlm"):
        return run_language_model(args, run_config, out)
    dist = init_distributed(args.device)  # under torchrun: join the group, one device per rank
    # Check everything (out dir, data, tokenizer, model) before touching the disk.
    check_out_dir(out, resume=args.resume, overwrite=args.overwrite)
    train = load_parallel(run_config.data, run_config.data.train)
    valid = load_parallel(run_config.data, run_config.data.valid) if run_config.data.valid else []

    tokenizer = load_tokenizer(out) if args.resume else None
    if tokenizer is None:
        tokenizer = build_tokenizer(run_config.tokenizer, train)
    trainer = TranslationTrainer(
        run_config,
        out,
        tokenizer=tokenizer,
        train_pairs=train,
        valid_pairs=valid,
        device=args.device,
        progress=not args.no_progress,
        distributed=dist,
    )
    dist.on_main(prepare_out_dir, out, resume=args.resume, overwrite=args.overwrite)
    if train.dropped_empty:
        print(f"skipped {train.dropped_empty} training pairs with an empty side (data.skip_empty)")
    if args.resume and trainer.resume():
        print(f"resuming {out} from step {trainer.step}")
    if dist.is_main:
        (out / "run.json").write_text(run_config.to_json() + "\n", encoding="utf-8")
    n = trainer.model.num_parameters()
    print(
        f"{len(train)} training pairs ({trainer.corpus.dropped} longer than "
        f"data.max_len={run_config.data.max_len} dropped), vocabulary {tokenizer.vocab_size}, "
        f"{n / 1e6:.1f}M parameters, device {trainer.device}"
    )
    summary = trainer.fit()
    print(json.dumps({"out": str(out), **summary}))
    return 0
