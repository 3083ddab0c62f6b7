"""Fold a LoRA checkpoint's adapters into its base weights: an ordinary full checkpoint.

Examples:
  attnkit merge --checkpoint runs/smollm2_lora --out runs/smollm2_merged
  attnkit merge --checkpoint runs/smollm2_lora --base moved/smollm2 --out merged

A LoRA run saves only its adapters and the path and SHA-256 of its base's
weights; the base is read from there (or from --base, which must hold the
same weights). Every W of an adapted projection becomes W + (alpha / r) B A.
The result needs no base and works with every command, --precision and
export, as any checkpoint. (Commands also read a LoRA checkpoint directly,
merging it in memory each time.)
"""

from __future__ import annotations

import argparse
from pathlib import Path

from attnkit.errors import UsageError
from attnkit.output_paths import check_not_in_run_checkpoints, check_replaceable_dir


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--checkpoint", required=True, help="a LoRA checkpoint or run directory (its latest)"
    )
    parser.add_argument("--out", required=True, help="directory for the merged checkpoint")
    parser.add_argument(
        "--base", help="the base checkpoint, if it moved (default: the path the run recorded)"
    )
    parser.add_argument("--overwrite", action="store_true", help="replace --out if it exists")


def run(args: argparse.Namespace) -> int:
    from attnkit.checkpoints.adapters import read_adapter_info
    from attnkit.checkpoints.files import load_checkpoint, save_checkpoint
    from attnkit.checkpoints.loading import load_model
    from attnkit.checkpoints.rundir import resolve_checkpoint
    from attnkit.cli.common import checkpoint_inputs

    source = resolve_checkpoint(args.checkpoint)
    info = read_adapter_info(source)
    if info is None:
        raise UsageError(
            f"--checkpoint {source}: not a LoRA checkpoint (no adapter.json); nothing to merge"
        )
    # --base, like --checkpoint, names a checkpoint or a run directory (its latest).
    base = _resolve_base(args.base) if args.base else Path(info.base.path)
    # The output-path policy: never over a file or device, an input or a directory
    # holding one, a locked run; an existing directory only with --overwrite; nothing
    # inside the adapters' checkpoint or the base's (inside the adapters' run is fine).
    target = check_replaceable_dir(
        args.out, overwrite=args.overwrite,
        inputs=[args.checkpoint, source, base, *([args.base] if args.base else [])],
        checkpoints=[source, *(checkpoint_inputs(base) or [base])],
    )  # fmt: skip
    check_not_in_run_checkpoints(target)  # not beside another run's own checkpoints
    loaded = load_model(source, "cpu", base=base if args.base else None)
    saved = load_checkpoint(source, load_optimizer=False)
    lora = info.lora
    save_checkpoint(
        target,  # links followed: a link to a directory keeps pointing at the new one
        model_state=loaded.model.state_dict(),
        config=saved.config,
        tokenizer_json=saved.tokenizer_json,
        trainer_state={
            "merged_from": {
                "adapters": str(source),
                "base": str(base),
                "base_sha256": info.base.sha256,
                "lora": lora.to_dict(),
            }
        },  # fmt: skip
    )
    n = sum(p.numel() for p in loaded.model.parameters())
    print(
        f"merged rank-{lora.rank} adapters ({', '.join(lora.targets)}) of {source} into "
        f"{base}'s weights: {args.out} ({n / 1e6:.2f}M parameters)"
    )
    return 0


def _resolve_base(path: str) -> Path:
    """``--base``: a checkpoint directory, or a run directory (its latest checkpoint)."""
    from attnkit.checkpoints.rundir import resolve_checkpoint
    from attnkit.errors import CheckpointError

    try:
        return resolve_checkpoint(path)
    except CheckpointError as e:
        raise UsageError(f"--base {e}") from None
