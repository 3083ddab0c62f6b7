"""Translate text with a trained checkpoint, one output line per input line.

Reads --input FILE, or standard input when no --input is given. Beam search
(--beam 4 --alpha 0.6, the paper's) by default; --greedy, or --sample with
--temperature/--top-k/--top-p/--seed. With --nbest N > 1, each output line
holds the N best hypotheses separated by tabs.
"""

from __future__ import annotations

import argparse
import sys

from attnkit.cli.common import add_device_argument, add_precision_argument
from attnkit.errors import UsageError


def add_decoding_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--beam", type=int, default=4, help="beam size (default: 4)")
    parser.add_argument(
        "--alpha", type=float, default=0.6, help="length penalty alpha (default: 0.6)"
    )
    parser.add_argument("--greedy", action="store_true", help="greedy search (beam 1)")
    parser.add_argument("--batch-size", type=int, default=64, help="sentences per batch")
    parser.add_argument(
        "--max-len-b",
        type=int,
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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", required=True, help="checkpoint or run directory")
    parser.add_argument("--input", help="text file, one sentence per line (default: stdin)")
    add_decoding_arguments(parser)
    parser.add_argument("--nbest", type=int, default=1, help="hypotheses per line (beam only)")
    parser.add_argument("--sample", action="store_true", help="sample instead of searching")
    parser.add_argument("--temperature", type=float, default=1.0, help="sampling temperature")
    parser.add_argument("--top-k", type=int, default=0, help="sample from the k best (0 = all)")
    parser.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed")
    add_device_argument(parser)


def check_decoding_arguments(args: argparse.Namespace) -> None:
    if args.beam < 1:
        raise UsageError(f"--beam must be >= 1, got {args.beam}")
    if args.alpha < 0:
        raise UsageError(f"--alpha must be >= 0, got {args.alpha}")
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
    return stepper_for(apply_precision(model, args.precision, path=path), path)


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

    from attnkit.cli.common import load_for
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
    lines = read_input_lines(args.input) if args.input is not None else None
    loaded = load_for("translate", args.checkpoint, args.device)
    model, tokenizer = loaded.model, loaded.tokenizer
    stepper = stepper_from_args(model, args)
    if lines is None:
        lines = read_input_lines(None)
    device = next(model.parameters()).device
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
    beam = 1 if args.greedy else args.beam
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
    out = sys.stdout
    for r in results:
        hyps = r.nbest[0][: args.nbest] if args.nbest > 1 else [r.nbest[0][0]]
        out.write("\t".join(tokenizer.decode(h.tokens) for h in hyps) + "\n")
    out.flush()
    return 0
