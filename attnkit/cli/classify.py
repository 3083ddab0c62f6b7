"""Label texts with a text-classification checkpoint (``task: text_classification``).

Reads one example per line, from --input or standard input: a text, or a
sentence pair as text_a<TAB>text_b. Prints one line per example: the label
and its probability (tab-separated), or with --json one JSON object with
every label's probability. Examples longer than the model's positions (or
--max-len tokens) are cut, and a warning on stderr says how many.

Example:
  echo "a gripping , funny film ." | attnkit classify --checkpoint runs/sst2
  attnkit classify --checkpoint runs/sst2 --input reviews.txt --json
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, cast

from attnkit import jsonio
from attnkit.cli.common import (
    CHECKPOINT_HELP,
    add_device_argument,
    add_precision_argument,
    label_names,
    load_for,
    named_checkpoint,
)
from attnkit.errors import DataError, UsageError

if TYPE_CHECKING:
    from attnkit.checkpoints.loading import LoadedModel


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", required=True, help=CHECKPOINT_HELP)
    parser.add_argument("--input", help="file of examples, one per line (default: stdin)")
    parser.add_argument("--batch-size", type=int, default=64, help="examples per batch")
    parser.add_argument(
        "--max-len", type=int, help="cut examples to this many tokens (default: the model's)"
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per example")
    add_precision_argument(parser)
    add_device_argument(parser)


def load_classifier(command: str, path: str, device: str | None) -> LoadedModel:
    """An encoder-only checkpoint with a classification head, for ``attnkit command``."""
    loaded = load_for(command, path, device)
    if getattr(loaded.config, "num_labels", 0) < 1:
        raise UsageError(
            f"{path}: this encoder-only checkpoint has no classification head (num_labels=0); "
            "fine-tune one with attnkit train --init CKPT and task: text_classification"
        )
    if getattr(loaded.config, "label_level", "sequence") != "sequence":
        raise UsageError(
            f"{path}: this checkpoint labels tokens, not texts (label_level: token); use "
            "attnkit tag (named entities) or attnkit answer (extractive QA) for it"
        )
    return loaded


def run(args: argparse.Namespace) -> int:
    from torch import nn

    from attnkit.cli.inference_args import plan_for
    from attnkit.data.classification import split_input_line
    from attnkit.data.readers import read_input_lines
    from attnkit.evaluation.text_classification import encode_texts, predict_probs
    from attnkit.inference import prepare

    if args.batch_size < 1:
        raise UsageError(f"--batch-size must be >= 1, got {args.batch_size}")
    args.checkpoint = named_checkpoint(args.checkpoint)  # hf:ORG/NAME: imported once
    loaded = load_classifier("classify", args.checkpoint, args.device)
    model, tokenizer, config = loaded.model, loaded.tokenizer, loaded.config
    max_len = config.max_len if args.max_len is None else args.max_len
    if not 4 <= max_len <= config.max_len:
        raise UsageError(f"--max-len must be in [4, {config.max_len}], got {max_len}")
    model = cast(nn.Module, prepare(loaded, plan_for(loaded, args, "classify")))  # --precision
    name = args.input or "<stdin>"
    lines = read_input_lines(args.input)
    examples = [split_input_line(line, f"{name}:{n}") for n, line in enumerate(lines, 1)]
    for n, (text, pair) in enumerate(examples, 1):
        if not text.strip() or (pair is not None and not pair.strip()):
            raise DataError(f"{name}:{n}: empty text")
    if not examples:
        return 0
    pairs = [p for _, p in examples if p is not None]
    if pairs and len(pairs) != len(examples):
        raise DataError(f"{name}: mixes single texts and text_a<TAB>text_b pairs")
    encoded = encode_texts(tokenizer, [t for t, _ in examples], pairs or None, max_len)
    if encoded.truncated:
        print(f"attnkit classify: warning: {encoded.truncated} example(s) cut to {max_len} "
              "tokens", file=sys.stderr)  # fmt: skip
    probs = predict_probs(model, encoded, pad_id=tokenizer.pad_id, batch_size=args.batch_size)
    names = label_names(config)
    for row in probs:
        best = int(row.argmax())
        if args.json:
            every = {n: round(float(p), 6) for n, p in zip(names, row)}
            print(jsonio.dumps({"label": names[best], "probability": round(float(row[best]), 6),
                                "probabilities": every}, ensure_ascii=False))  # fmt: skip
        else:
            print(f"{names[best]}\t{float(row[best]):.4f}")
    return 0
