"""Prepare a run's training data ahead of training: tokenizer, then memory-mapped token ids.

Reads the same YAML run config as ``attnkit train`` and does what its first
run would do before the first step: trains the tokenizer on a seeded sample
of at most ``tokenizer.sample_size`` records (or reads ``tokenizer.path``),
then encodes every training pair (or an LM corpus's text) on all cores into
token-id files (uint16, or uint32 for vocabularies over 65,536), in the
cache (``data.cache_dir``, default ``$ATTNKIT_CACHE_DIR`` or
``~/.cache/attnkit``) keyed by a hash of the input files and the settings.
``attnkit train`` with the same config then starts in seconds; running
prepare again reuses the result, or says what changed and rebuilds it.
With ``data.loading: streaming`` only the tokenizer is prepared.

Examples:
  attnkit prepare --config multi30k_de_en_cpu --set data.dir=data/multi30k
  attnkit prepare --config big.yaml --set data.cache_dir=/scratch/cache

A preparation killed half-way leaves nothing a later run trusts.
"""

from __future__ import annotations

import argparse

from attnkit import jsonio
from attnkit.cli.common import add_set_argument


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        required=True,
        help="YAML run config, or a packaged recipe's name (attnkit config list)",
    )
    add_set_argument(parser)


def run(args: argparse.Namespace) -> int:
    from attnkit.training.runconfig import load_run_config
    from attnkit.training.tasks.corpus import prepare_run_data

    run_config = load_run_config(args.config, list(args.overrides))
    summary = prepare_run_data(run_config, log=print)
    print(jsonio.dumps(summary))
    return 0
