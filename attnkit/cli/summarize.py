"""Summarize texts with a summarization checkpoint (``task: summarization``).

Works on an encoder-decoder (trained from scratch, or warm-started from
BERT/MiniLM) and on a decoder-only LM fine-tuned to summarize (SmolLM2-Instruct:
the text is put in the instruction prompt it was trained with, in its chat
template). Input: one document per line (a file, or standard input), or a
``.jsonl`` file with one ``{"text": ...}`` per line. Output: one summary per
line, or with ``--json`` one ``{"summary": ...}`` object per line.

Examples:
  attnkit summarize --checkpoint runs/aeslc --input emails.jsonl
  echo "Please find attached the Q3 report ..." | attnkit summarize --checkpoint runs/aeslc
  attnkit summarize --checkpoint runs/aeslc_smollm2 --input emails.txt --json
  attnkit summarize --checkpoint runs/aeslc --input email.txt --prompt-lookup 10
"""

from __future__ import annotations

import argparse
import sys

from attnkit import jsonio
from attnkit.cli.argtypes import finite_float, integer
from attnkit.cli.common import add_device_argument
from attnkit.errors import UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", required=True, help="checkpoint or run directory")
    parser.add_argument(
        "--input",
        help='one document per line, or a .jsonl file of {"text": ...} (default: stdin)',
    )
    parser.add_argument(
        "--beam", type=integer, default=4,
        help="beam size, encoder-decoders (default: 4; a decoder-only model is greedy)",
    )  # fmt: skip
    parser.add_argument("--greedy", action="store_true", help="greedy search (beam 1)")
    parser.add_argument(
        "--alpha", type=finite_float, default=0.6, help="length penalty alpha (default: 0.6)"
    )
    parser.add_argument(
        "--max-tokens", type=integer, default=32,
        help="longest summary, in tokens (default: 32)",
    )  # fmt: skip
    parser.add_argument(
        "--max-source-tokens", type=integer,
        help="cut each text to this many tokens (default: the model's positions; "
        "448 for a decoder-only model)",
    )  # fmt: skip
    parser.add_argument("--batch-size", type=integer, default=32, help="texts per batch")
    parser.add_argument(
        "--prompt-lookup", type=integer, default=0, metavar="K",
        help="summarize one text at a time, greedily, drafting up to K tokens per step from "
        "the text itself (prompt-lookup speculative decoding: greedy search's summaries, each "
        "one sooner, fewer texts per second than batches; an encoder-decoder ignores --beam; "
        "0 = off)",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help='one {"summary": ...} per line')
    add_device_argument(parser)


def check_arguments(args: argparse.Namespace) -> None:
    for name in ("beam", "max_tokens", "batch_size"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.prompt_lookup < 0:
        raise UsageError(f"--prompt-lookup must be >= 0, got {args.prompt_lookup}")
    if args.max_source_tokens is not None and args.max_source_tokens < 1:
        raise UsageError(f"--max-source-tokens must be >= 1, got {args.max_source_tokens}")
    if not 0 <= args.alpha <= 10:
        raise UsageError(f"--alpha must be in [0, 10], got {args.alpha}")


def run(args: argparse.Namespace) -> int:
    from attnkit.cli.common import check_input_file, load_for, named_checkpoint
    from attnkit.data.summaries import read_documents
    from attnkit.decoding.summaries import is_decoder_only, summarize_texts
    from attnkit.inference import stepper_for

    check_arguments(args)
    check_input_file(args.input, "--input")  # a bad file fails before the model loads
    texts = read_documents(args.input) if args.input is not None else None
    args.checkpoint = named_checkpoint(args.checkpoint)  # hf:ORG/NAME: imported once
    loaded = load_for("summarize", args.checkpoint, getattr(args, "device", None))
    beam = 1 if args.greedy or is_decoder_only(loaded.model) else args.beam
    if texts is None:
        texts = read_documents(None)
    summaries = summarize_texts(
        loaded.model, loaded.tokenizer, texts, beam=beam, alpha=args.alpha,
        max_tokens=args.max_tokens, text_tokens=args.max_source_tokens,
        batch_size=args.batch_size, stepper=stepper_for(loaded.model),
        prompt_lookup=args.prompt_lookup,
    )  # fmt: skip
    out = sys.stdout
    for summary in summaries:
        out.write((jsonio.dumps({"summary": summary}) if args.json else summary) + "\n")
    out.flush()
    return 0
