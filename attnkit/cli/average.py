"""Average the weights of several checkpoints (the paper averages the last 5, §6.1).

Examples:
  attnkit average --checkpoints runs/de_en/checkpoints/step_* --out runs/de_en/averaged
  attnkit average --run runs/de_en --last 5 --out runs/de_en/averaged

The result is a complete checkpoint (config and tokenizer from the newest
input) that `attnkit translate` and `attnkit evaluate` accept.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from attnkit.cli.argtypes import integer
from attnkit.errors import UsageError
from attnkit.output_paths import check_not_in_run_checkpoints, check_replaceable_dir


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoints", nargs="+", help="checkpoint directories to average")
    parser.add_argument("--run", help="a run directory: average its newest checkpoints")
    parser.add_argument("--last", type=integer, default=5, help="with --run: how many (default: 5)")
    parser.add_argument("--out", required=True, help="directory for the averaged checkpoint")
    parser.add_argument("--overwrite", action="store_true", help="replace --out if it exists")


def run(args: argparse.Namespace) -> int:
    from attnkit.checkpoints import average_checkpoints, list_checkpoints
    from attnkit.checkpoints.files import load_checkpoint, save_checkpoint

    if bool(args.checkpoints) == bool(args.run):
        raise UsageError("give either --checkpoints DIR... or --run DIR")
    if args.run:
        if args.last < 1:
            raise UsageError(f"--last must be >= 1, got {args.last}")
        found = list_checkpoints(args.run)
        if not found:
            raise UsageError(f"{args.run}: holds no checkpoints/step_* directories")
        dirs = found[-args.last :]
    else:
        dirs = sorted(Path(d) for d in args.checkpoints)
    out = Path(args.out)
    if out.exists() and not args.overwrite:
        raise UsageError(f"{out}: already exists; pass --overwrite to replace it")
    # Never over a file or device, one of the inputs, a directory holding them or inside
    # one (--run R --out R/averaged is beside them), or a run that is training (its lock).
    target = check_replaceable_dir(out, overwrite=args.overwrite, inputs=dirs, checkpoints=dirs)
    check_not_in_run_checkpoints(target)  # a run's checkpoints/ holds its own steps only
    averaged = average_checkpoints(dirs)
    newest = load_checkpoint(dirs[-1], load_optimizer=False)
    save_checkpoint(
        target,  # links followed: a link to a directory keeps pointing at the new one
        model_state=averaged,
        config=newest.config,
        tokenizer_json=newest.tokenizer_json,
        trainer_state={"averaged_from": [str(d) for d in dirs]},
    )
    print(f"averaged {len(dirs)} checkpoints into {out}")
    return 0
