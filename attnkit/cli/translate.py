"""Translate text with a trained checkpoint, one output line per input line.

Reads --input FILE, or standard input when no --input is given. Beam search
(--beam 4 --alpha 0.6, the paper's) by default; --greedy, or --sample with
--temperature/--top-k/--top-p/--seed. With --nbest N > 1, each output line
holds the N best hypotheses separated by tabs.

--prompt-lookup K translates greedily, one line at a time, drafting up to K
tokens per step from the source line and the output so far (names, numbers and
words that pass through unchanged), each draft checked in one decoder pass:
greedy search's output, sooner for text that copies from its source.

--engine ctranslate2 or onnxruntime decodes a Transformer checkpoint on that
engine instead (converted on first use into CHECKPOINT/engines/, reused
afterwards; see attnkit.engines.registry).

How to run (precision, kernels, attention backend, cache, engine, the device's
search settings) is one inference plan (attnkit.inference); `attnkit --debug
translate ...` prints it on stderr.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from attnkit.cli.argtypes import finite_float, integer, seed
from attnkit.cli.common import (
    CHECKPOINT_HELP,
    add_device_argument,
    named_checkpoint,
)
from attnkit.cli.inference_args import add_decoding_arguments, check_decoding_arguments
from attnkit.errors import UsageError

if TYPE_CHECKING:
    import torch

    from attnkit.decoding.common import DecodeResult
    from attnkit.decoding.protocol import AnyStepper


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
    parser.add_argument(
        "--prompt-lookup", type=integer, default=0, metavar="K",
        help="greedy, one line at a time, drafting up to K tokens per step from the source "
        "line (prompt-lookup speculative decoding: greedy search's output; implies --greedy; "
        "0 = off)",
    )  # fmt: skip
    add_device_argument(parser)


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
    from attnkit.cli.inference_args import decode_options, engine_from_args, stepper_from_args
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
    check_lookup(args)

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
    beam = 1 if args.greedy or args.prompt_lookup else args.beam
    rows = beam * (args.batch_size if lines is None else min(args.batch_size, len(lines)))
    check_decode_fits(model.config, rows, device, f"--beam {beam} with --batch-size "
                      f"{args.batch_size}")  # fmt: skip
    stepper, plan = stepper_from_args(loaded, args, "translate")
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
    if args.prompt_lookup:
        results = _looked_up(args, loaded.model, stepper, src, device, max_positions - 1)
        _write_lines([[tokenizer.decode(r.tokens[0])] for r in results])
        return 0
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
            search=plan.search,
        )
    nbest = [r.nbest[0][: args.nbest] if args.nbest > 1 else [r.nbest[0][0]] for r in results]
    _write_lines([[tokenizer.decode(h.tokens) for h in hyps] for hyps in nbest])
    return 0


def check_lookup(args: argparse.Namespace) -> None:
    """``--prompt-lookup`` with what it can be used with: greedy search, attnkit's decoding."""
    if args.prompt_lookup < 0:
        raise UsageError(f"--prompt-lookup must be >= 0, got {args.prompt_lookup}")
    if not args.prompt_lookup:
        return
    if args.sample:
        raise UsageError("--prompt-lookup: greedy search only, not with --sample")
    if args.nbest > 1:
        raise UsageError("--prompt-lookup: one hypothesis per line (greedy), not --nbest")
    if args.engine != "attnkit":
        raise UsageError(
            f"--prompt-lookup: attnkit's own decoding only, not --engine {args.engine}"
        )


def _looked_up(
    args: argparse.Namespace,
    model: AnyStepper,
    stepper: AnyStepper,
    src: list[list[int]],
    device: torch.device,
    max_len: int,
) -> list[DecodeResult]:
    """Greedy search's results by prompt lookup; ``--debug``: one line of counts on stderr."""
    import time

    from attnkit.decoding.source_lookup import lookup_decode_ids
    from attnkit.decoding.speculative import SpeculativeStats

    stats = SpeculativeStats()
    began = time.perf_counter()
    results = lookup_decode_ids(model, src, num_tokens=args.prompt_lookup,
                                max_len_b=args.max_len_b, max_len=max_len,
                                device=device, stepper=stepper, stats=stats)  # fmt: skip
    if getattr(args, "debug", False):
        seconds = time.perf_counter() - began
        print(f"prompt lookup: {stats.tokens} tokens in {stats.forwards} decoder passes "
              f"({stats.tokens_per_forward:.2f} per pass), {stats.accepted} of "
              f"{stats.drafted} drafted tokens accepted, {stats.tokens / seconds:.1f} tokens/s",
              file=sys.stderr)  # fmt: skip
    return results


def _write_lines(hypotheses: list[list[str]]) -> None:
    """One line per input: its hypotheses, best first, separated by tabs."""
    out = sys.stdout
    for hyps in hypotheses:
        out.write("\t".join(hyps) + "\n")
    out.flush()
