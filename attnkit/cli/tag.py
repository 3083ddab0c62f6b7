"""Tag the words of sentences with a token-classification checkpoint (named entities).

Reads one sentence per line, from --input or standard input, split into words
at whitespace. Prints one line per sentence: each word with its tag as
``word/TAG``, separated by spaces (the tag follows the last ``/``), tags in
--scheme (default BIO). With --json, one JSON object per sentence:
``{"words": [...], "tags": [...], "entities": [{"type", "start", "end", "text"}]}``
(``end`` exclusive, word indices; ``text`` the words joined by spaces).

A sentence longer than the model's positions (or --max-len tokens) is cut: the
words past the cut are tagged O, and a warning on stderr says how many sentences
were cut.

Example:
  echo "EU rejects German call to boycott British lamb ." | attnkit tag --checkpoint runs/ner
  attnkit tag --checkpoint runs/ner --input sentences.txt --json
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, cast

from attnkit import jsonio
from attnkit.cli.common import (
    add_device_argument,
    add_precision_argument,
    load_for,
    named_checkpoint,
)
from attnkit.errors import DataError, UsageError

if TYPE_CHECKING:
    from attnkit.checkpoints.loading import LoadedModel
    from attnkit.models.lm_config import EncoderOnlyConfig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", required=True, help="checkpoint or run directory")
    parser.add_argument("--input", help="file of sentences, one per line (default: stdin)")
    parser.add_argument("--batch-size", type=int, default=64, help="sentences per batch")
    parser.add_argument(
        "--max-len", type=int, help="cut sentences to this many tokens (default: the model's)"
    )
    parser.add_argument(
        "--scheme", default="bio", choices=("bio", "iob2", "iob1", "bioes"),
        help="the scheme of the printed tags (default: bio)",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="one JSON object per sentence")
    add_precision_argument(parser)
    add_device_argument(parser)


def load_tagger(command: str, path: str, device: str | None) -> LoadedModel:
    """An encoder-only checkpoint with a token-classification head, for ``attnkit command``."""
    loaded = load_for(command, path, device)
    config = loaded.config
    if getattr(config, "label_level", "sequence") != "token" or config.num_labels < 1:
        raise UsageError(
            f"{path}: this checkpoint has no token-classification head; fine-tune one with "
            "attnkit train --init CKPT and task: token_classification"
        )
    return loaded


def tag_names(config: EncoderOnlyConfig) -> list[str]:
    return list(config.label_names) or [str(i) for i in range(config.num_labels)]


def entity_records(words: list[str], tags: list[str]) -> list[dict[str, str | int]]:
    """The entities of BIO ``tags`` as ``{"type", "start", "end", "text"}`` records."""
    from attnkit.data.tag_schemes import entities

    return [{"type": e.type, "start": e.start, "end": e.end,
             "text": " ".join(words[e.start : e.end])} for e in entities(tags)]  # fmt: skip


def run(args: argparse.Namespace) -> int:
    from torch import nn

    from attnkit.cli.inference_args import plan_for
    from attnkit.data.readers import read_input_lines
    from attnkit.data.tag_schemes import from_bio
    from attnkit.data.token_tags import encode_words
    from attnkit.evaluation.token_classification import predict_tags
    from attnkit.inference import prepare

    args.checkpoint = named_checkpoint(args.checkpoint)  # hf:ORG/NAME: imported once
    if args.batch_size < 1:
        raise UsageError(f"--batch-size must be >= 1, got {args.batch_size}")
    loaded = load_tagger("tag", args.checkpoint, args.device)
    tokenizer, config = loaded.tokenizer, loaded.config
    max_len = config.max_len if args.max_len is None else args.max_len
    if not 3 <= max_len <= config.max_len:
        raise UsageError(f"--max-len must be in [3, {config.max_len}], got {max_len}")
    model = cast(nn.Module, prepare(loaded, plan_for(loaded, args, "tag")))  # --precision
    name = args.input or "<stdin>"
    sentences = [line.split() for line in read_input_lines(args.input)]
    for n, words in enumerate(sentences, 1):
        if not words:
            raise DataError(f"{name}:{n}: empty line; expected a sentence (words separated "
                            "by spaces)")  # fmt: skip
    if not sentences:
        return 0
    encoded = encode_words(tokenizer, sentences, max_len)
    if encoded.truncated:
        print(f"attnkit tag: warning: {encoded.truncated} sentence(s) cut to {max_len} tokens; "
              "the words past the cut are tagged O", file=sys.stderr)  # fmt: skip
    predicted = predict_tags(model, encoded, sentences, tag_names(config),
                             pad_id=tokenizer.pad_id, batch_size=args.batch_size)  # fmt: skip
    for words, tags in zip(sentences, predicted.tags):
        shown = from_bio(tags, args.scheme)
        if args.json:
            print(jsonio.dumps({"words": words, "tags": shown,
                              "entities": entity_records(words, tags)},
                             ensure_ascii=False))  # fmt: skip
        else:
            print(" ".join(f"{w}/{t}" for w, t in zip(words, shown)))
    return 0
