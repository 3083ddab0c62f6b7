"""Turn sentences into vectors with an encoder-only checkpoint (sentence embeddings).

Reads one text per line, from --input or standard input, and writes one vector
per line: JSON lines ({"text": ..., "embedding": [...]}) on standard output, or
to --output (.jsonl, or .npy: one float32 array of N x D). The encoder's last
hidden states are pooled over each text's tokens (mean, cls or max) and
L2-normalised, as sentence-transformers does; an imported sentence-transformers
model (e.g. all-MiniLM-L6-v2) brings its own pooling, normalisation and input
length, so the vectors are the ones SentenceTransformer.encode gives. Texts past
that length are cut, and a warning on stderr says how many.

Example:
  attnkit import --from hf sentence-transformers/all-MiniLM-L6-v2 --out minilm
  printf 'A man is eating food.\nA man eats.\n' | attnkit embed --checkpoint minilm
  attnkit embed --checkpoint minilm --input sentences.txt --output vectors.npy
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, cast

from attnkit import jsonio
from attnkit.cli.common import (
    add_device_argument,
    add_precision_argument,
    check_input_file,
    checkpoint_inputs,
    load_for,
    named_checkpoint,
)
from attnkit.errors import DataError, UsageError

if TYPE_CHECKING:
    from torch import Tensor

OUTPUT_KINDS = (".jsonl", ".npy")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", required=True, help="checkpoint or run directory")
    parser.add_argument("--input", help="file of texts, one per line (default: stdin)")
    parser.add_argument(
        "--output", help="write the vectors here: .jsonl or .npy (default: JSON lines on stdout)"
    )
    parser.add_argument(
        "--pooling", choices=("mean", "cls", "max"),
        help="how token vectors become one (default: the model's own, else mean)",
    )  # fmt: skip
    parser.add_argument(
        "--no-normalize", action="store_true", help="keep the vectors' lengths (no L2 norm)"
    )
    parser.add_argument("--batch-size", type=int, default=32, help="texts per batch")
    parser.add_argument(
        "--max-len", type=int, help="cut texts to this many tokens (default: the model's own)"
    )
    add_precision_argument(parser)
    add_device_argument(parser)


def _write(vectors: Tensor, texts: list[str], output: str | None, inputs: list[Path]) -> None:
    from attnkit.output_paths.atomic import atomic_file

    if output is None:
        for text, row in zip(texts, vectors.tolist()):
            print(jsonio.dumps({"text": text, "embedding": row}, ensure_ascii=False))
        return
    suffix = Path(output).suffix
    with atomic_file(output, option="--output", inputs=inputs) as tmp:
        if suffix == ".npy":
            import numpy as np

            with open(tmp, "wb") as f:
                np.save(f, vectors.numpy().astype(np.float32))
        else:
            with open(tmp, "w", encoding="utf-8") as f:
                for text, row in zip(texts, vectors.tolist()):
                    f.write(jsonio.dumps({"text": text, "embedding": row}, ensure_ascii=False))
                    f.write("\n")


def run(args: argparse.Namespace) -> int:
    from torch import nn

    from attnkit.cli.inference_args import plan_for
    from attnkit.data.readers import read_input_lines
    from attnkit.evaluation.embeddings import embed_texts
    from attnkit.inference import prepare
    from attnkit.interop.hf.pooling import embedding_settings

    args.checkpoint = named_checkpoint(args.checkpoint)  # hf:ORG/NAME: imported once
    if args.batch_size < 1:
        raise UsageError(f"--batch-size must be >= 1, got {args.batch_size}")
    if args.output is not None and Path(args.output).suffix not in OUTPUT_KINDS:
        raise UsageError(f"--output {args.output}: expected a .jsonl or .npy file name")
    check_input_file(args.input, "--input")
    inputs = [*checkpoint_inputs(args.checkpoint), *([Path(args.input)] if args.input else [])]
    if args.output is not None:  # refuse a bad output path before the model loads
        from attnkit.output_paths.policy import check_output_file

        check_output_file(args.output, option="--output", inputs=inputs)
    loaded = load_for("embed", args.checkpoint, args.device)
    defaults = embedding_settings(loaded.directory, loaded.config)
    max_len = defaults.max_len if args.max_len is None else args.max_len
    if not 2 <= max_len <= loaded.config.max_len:
        raise UsageError(f"--max-len must be in [2, {loaded.config.max_len}], got {max_len}")
    model = cast(nn.Module, prepare(loaded, plan_for(loaded, args, "embed")))  # --precision
    name = args.input or "<stdin>"
    texts = read_input_lines(args.input)
    for n, text in enumerate(texts, 1):
        if not text.strip():
            raise DataError(f"{name}:{n}: empty text")
    result = embed_texts(
        model, loaded.tokenizer, texts, pooling=args.pooling or defaults.pooling,
        normalize=defaults.normalize and not args.no_normalize, max_len=max_len,
        batch_size=args.batch_size,
    )  # fmt: skip
    if result.truncated:
        print(f"attnkit embed: warning: {result.truncated} text(s) cut to {max_len} tokens",
              file=sys.stderr)  # fmt: skip
    _write(result.vectors, texts, args.output, inputs)
    return 0
