"""Translate text with a trained checkpoint, one output line per input line.

Reads --input FILE, or standard input when no --input is given. Beam search
(--beam 4 --alpha 0.6, the paper's) by default; --greedy, or --sample with
--temperature/--top-k/--top-p/--seed. With --nbest N > 1, each output line
holds the N best hypotheses separated by tabs.

--engine ctranslate2 or onnxruntime decodes a Transformer checkpoint on that
engine instead (converted on first use into CHECKPOINT/engines/, reused
afterwards; see attnkit.interop.engines).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from attnkit.cli.argtypes import finite_float, integer, seed
from attnkit.cli.common import (
    CHECKPOINT_HELP,
    add_device_argument,
    add_precision_argument,
    named_checkpoint,
)
from attnkit.errors import UsageError

# GNMT's length penalty ((5 + |Y|) / 6) ** alpha overflows a float past alpha ~ 130
# on long outputs; useful values are 0..2.
MAX_ALPHA = 10.0
# attnkit.interop.engines.NAMES, spelled out so that parsing imports no engine.
ENGINES = ("attnkit", "ctranslate2", "onnxruntime")


def add_decoding_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--beam", type=integer, default=4, help="beam size (default: 4)")
    parser.add_argument(
        "--alpha", type=finite_float, default=0.6, help="length penalty alpha (default: 0.6)"
    )
    parser.add_argument("--greedy", action="store_true", help="greedy search (beam 1)")
    parser.add_argument("--batch-size", type=integer, default=64, help="sentences per batch")
    parser.add_argument(
        "--max-len-b",
        type=integer,
        default=50,
        help="output length limit = source length + this (default: 50)",
    )
    speed = parser.add_mutually_exclusive_group()
    speed.add_argument(
        "--compile",
        action="store_true",
        help="Transformer only: torch.compile the decode step (CUDA graphs on a GPU); "
        "each new batch shape compiles once, so it pays off on long inputs",
    )
    speed.add_argument(
        "--no-fast",
        action="store_true",
        help="the reference path, for debugging: the model's growing KV cache and plain "
        "fp32 linear layers (on a GPU the fast path is a static cache)",
    )
    add_precision_argument(parser)
    parser.add_argument(
        "--engine",
        choices=ENGINES,
        default="attnkit",
        help="Transformer checkpoints: decode with attnkit (default), CTranslate2 or "
        "onnxruntime; the first use converts the checkpoint into CHECKPOINT/engines/ "
        "(an option the engine cannot honour is refused; ctranslate2 beam search "
        "needs --alpha 0)",
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", required=True, help=CHECKPOINT_HELP)
    parser.add_argument("--input", help="text file, one sentence per line (default: stdin)")
    add_decoding_arguments(parser)
    parser.add_argument("--nbest", type=integer, default=1, help="hypotheses per line (beam only)")
    parser.add_argument("--sample", action="store_true", help="sample instead of searching")
    parser.add_argument(
        "--temperature", type=finite_float, default=1.0, help="sampling temperature"
    )
    parser.add_argument("--top-k", type=integer, default=0, help="sample from the k best (0 = all)")
    parser.add_argument("--top-p", type=finite_float, default=1.0, help="nucleus sampling mass")
    parser.add_argument("--seed", type=seed, default=0, help="sampling seed")
    add_device_argument(parser)


def check_decoding_arguments(args: argparse.Namespace) -> None:
    if args.beam < 1:
        raise UsageError(f"--beam must be >= 1, got {args.beam}")
    if not 0 <= args.alpha <= MAX_ALPHA:
        raise UsageError(f"--alpha must be in [0, {MAX_ALPHA:g}], got {args.alpha}")
    if args.batch_size < 1:
        raise UsageError(f"--batch-size must be >= 1, got {args.batch_size}")
    if args.max_len_b < 1:
        raise UsageError(f"--max-len-b must be >= 1, got {args.max_len_b}")


def decode_path(args: argparse.Namespace) -> str:
    """``--compile`` / ``--no-fast`` as a decoding path (``attnkit.decoding.stepper_for``)."""
    return "compiled" if args.compile else "reference" if args.no_fast else "fast"


def stepper_from_args(model, args: argparse.Namespace):
    """The ``Stepper`` that ``--compile`` / ``--no-fast`` / ``--precision`` ask for.

    ``model`` is converted in place for ``--precision`` (RNNs have one path only).
    """
    from attnkit.cli.common import apply_precision
    from attnkit.decoding.static import SupportsStaticCache, stepper_for

    if args.compile and not isinstance(model, SupportsStaticCache):
        raise UsageError("--compile: only Transformer checkpoints have a compiled decode step")
    path = decode_path(args)
    # a decode step's products: beam rows for each of a few sentences still decoding
    rows = max(1, getattr(args, "beam", 1)) * 8
    return stepper_for(apply_precision(model, args.precision, path=path, rows=rows), path)


def engine_from_args(args: argparse.Namespace, command: str, loaded: Any = None) -> Any:
    """The ``attnkit.interop.engines`` engine ``--engine`` names, converted on first use.

    ``loaded``: the checkpoint already loaded on the CPU (else it is loaded
    for a conversion only, on a cache miss).
    """
    from attnkit.cli.common import load_for
    from attnkit.interop.engines import open_engine

    def load(directory: Any) -> Any:
        return loaded if loaded is not None else load_for(command, directory, "cpu")

    def say(line: str) -> None:
        print(f"attnkit {command}: {line}", file=sys.stderr, flush=True)

    run, decode = engine_options(args)
    return open_engine(args.engine, args.checkpoint, run, decode, load=load, say=say)


def engine_options(args: argparse.Namespace) -> tuple[Any, Any]:
    """``args`` as the engines' ``RunOptions`` and ``DecodeOptions``, checked by the engine
    (a ``UsageError`` naming the first option ``--engine`` cannot honour)."""
    import torch

    from attnkit.interop.engines import ENGINES, RunOptions

    run = RunOptions(precision=args.precision, device=args.device,
                     threads=torch.get_num_threads(), path=decode_path(args))  # fmt: skip
    decode = decode_options(args)
    ENGINES[args.engine].check(run, decode)
    return run, decode


def decode_options(args: argparse.Namespace) -> Any:
    """The search options of ``args`` as ``attnkit.interop.engines.DecodeOptions``."""
    from attnkit.interop.engines import DecodeOptions

    beam = 1 if args.greedy else args.beam
    nbest = getattr(args, "nbest", 1) if beam > 1 else 1
    sample = getattr(args, "sample", False)
    return DecodeOptions(beam=beam, alpha=args.alpha, nbest=nbest, max_len_b=args.max_len_b,
                         batch_size=args.batch_size, sample=sample)  # fmt: skip


def truncate_sources(
    sources: list[list[int]], limit: int, input_name: str | None
) -> list[list[int]]:
    """Cut sources to ``limit`` tokens (the model's positions, less EOS), with one warning.

    Longer inputs cannot be encoded at all; rather than fail the whole file,
    each is shortened and the first offending line is named on stderr.
    """
    long = [i for i, ids in enumerate(sources, start=1) if len(ids) > limit]
    if long:
        where = f"{input_name or '<stdin>'}:{long[0]}"
        print(
            f"attnkit translate: warning: {len(long)} input line(s) longer than the model's "
            f"{limit} tokens were truncated (first: {where})",
            file=sys.stderr,
        )
    return [ids[:limit] for ids in sources]


def run(args: argparse.Namespace) -> int:
    import torch

    from attnkit.cli.common import check_decode_fits, check_input_file, load_for
    from attnkit.data.readers import read_input_lines
    from attnkit.decoding.text import decode_ids

    check_decoding_arguments(args)
    if not 1 <= args.nbest <= args.beam:
        raise UsageError(f"--nbest must be between 1 and --beam ({args.beam}), got {args.nbest}")
    if args.temperature <= 0:
        raise UsageError(f"--temperature must be > 0, got {args.temperature}")
    if args.top_k < 0:
        raise UsageError(f"--top-k must be >= 0, got {args.top_k}")
    if not 0 < args.top_p <= 1:
        raise UsageError(f"--top-p must be in (0, 1], got {args.top_p}")

    # A bad --input fails before the model loads; stdin is read once the model is ready.
    check_input_file(args.input, "--input")  # never /dev/zero: it would fill memory
    lines = read_input_lines(args.input) if args.input is not None else None
    args.checkpoint = named_checkpoint(args.checkpoint)  # hf:ORG/NAME: imported once
    if args.engine != "attnkit":
        engine = engine_from_args(args, "translate")
        lines = read_input_lines(None) if lines is None else lines
        _write_lines(engine.translate(lines, decode_options(args)))
        return 0
    loaded = load_for("translate", args.checkpoint, args.device)
    model, tokenizer = loaded.model, loaded.tokenizer
    device = next(model.parameters()).device
    beam = 1 if args.greedy else args.beam
    rows = beam * (args.batch_size if lines is None else min(args.batch_size, len(lines)))
    check_decode_fits(model.config, rows, device, f"--beam {beam} with --batch-size "
                      f"{args.batch_size}")  # fmt: skip
    stepper = stepper_from_args(model, args)
    if lines is None:
        lines = read_input_lines(None)
    sampling = None
    if args.sample:
        generator = torch.Generator(device=device).manual_seed(args.seed)
        sampling = {"temperature": args.temperature, "top_k": args.top_k, "top_p": args.top_p,
                    "generator": generator}  # fmt: skip
    # A blank line translates to a blank line (decode_ids skips a source of EOS alone).
    src = truncate_sources(
        [tokenizer.encode(line) if line.strip() else [] for line in lines],
        model.config.max_len - 1,
        args.input,
    )
    src = [ids + [tokenizer.eos_id] for ids in src]
    max_positions = model.config.max_len
    with torch.no_grad():
        results = decode_ids(
            stepper,
            src,
            beam=beam,
            alpha=args.alpha,
            nbest=args.nbest if beam > 1 else 1,
            sampling=sampling,
            batch_size=args.batch_size,
            max_len_b=args.max_len_b,
            max_len=max_positions - 1,
            device=device,
        )
    nbest = [r.nbest[0][: args.nbest] if args.nbest > 1 else [r.nbest[0][0]] for r in results]
    _write_lines([[tokenizer.decode(h.tokens) for h in hyps] for hyps in nbest])
    return 0


def _write_lines(hypotheses: list[list[str]]) -> None:
    """One line per input: its hypotheses, best first, separated by tabs."""
    out = sys.stdout
    for hyps in hypotheses:
        out.write("\t".join(hyps) + "\n")
    out.flush()
