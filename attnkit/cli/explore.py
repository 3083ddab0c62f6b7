"""Write the attention explorer for one text as a self-contained HTML file.

Works for every family. Translation models: the text is translated (beam
search) and the page shows encoder self-, decoder self- and cross-attention
(an RNN: its one cross-attention map). Causal LMs: the text is continued
greedily for --max-new-tokens and the page shows the self-attention over
prompt + continuation. Masked LMs: the text as it is ([MASK] markers filled
in the output). Text classifiers: [CLS] text [SEP] (a text_a<TAB>text_b pair:
[CLS] a [SEP] b [SEP]) and every label's probability. The file needs no
network: open it from disk. It shows what `attnkit serve` shows at / for the
same text.

Example:
  attnkit explore --checkpoint quickstart-out --text "three hundred forty-two" --out page.html
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from attnkit.cli.argtypes import integer
from attnkit.cli.common import (
    CHECKPOINT_HELP,
    add_device_argument,
    check_decode_fits,
    checkpoint_inputs,
    named_checkpoint,
)
from attnkit.errors import UsageError
from attnkit.output_paths import atomic_file, check_output_file

if TYPE_CHECKING:
    from attnkit.checkpoints.loading import LoadedModel

MAX_NEW_TOKENS = 1024  # or the model's context, if longer


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", required=True, help=CHECKPOINT_HELP)
    parser.add_argument("--text", required=True, help="the source sentence, prompt or text")
    parser.add_argument("--out", required=True, help="HTML file to write")
    parser.add_argument("--beam", type=integer, default=4, help="beam size (default: 4)")
    parser.add_argument("--nbest", type=integer, default=4, help="hypotheses listed (default: 4)")
    parser.add_argument(
        "--max-new-tokens", type=integer, default=20, help="causal LMs: tokens to add (default: 20)"
    )
    add_device_argument(parser)


def run(args: argparse.Namespace) -> int:
    from attnkit.cli.common import load_for
    from attnkit.serve.model_host import ModelHost, RequestError
    from attnkit.visualize.explorer import write_page

    if args.beam < 1:
        raise UsageError(f"--beam must be >= 1, got {args.beam}")
    if not 1 <= args.nbest:
        raise UsageError(f"--nbest must be >= 1, got {args.nbest}")
    if args.max_new_tokens < 0:
        raise UsageError(f"--max-new-tokens must be >= 0, got {args.max_new_tokens}")
    if not args.text.strip():
        raise UsageError("--text must not be empty")
    if not args.out.lower().endswith((".html", ".htm")):
        raise UsageError(f"--out must name a .html file, got {args.out}")
    args.checkpoint = named_checkpoint(args.checkpoint)  # hf:ORG/NAME: imported once
    inputs = checkpoint_inputs(args.checkpoint)
    check_output_file(args.out, option="--out", inputs=inputs)  # before any work
    loaded = load_for("explore", args.checkpoint, args.device)
    config = loaded.config
    if getattr(config, "num_labels", 0) and getattr(config, "label_level", "") == "sequence":
        return _explore_classifier(args, loaded, inputs)  # a token head: as a masked LM
    # The page shows the last window of the model's context; generating far past it only
    # makes the command run (10**11 tokens: forever) for text nobody sees mapped.
    most = max(MAX_NEW_TOKENS, loaded.config.max_len)
    if loaded.family.kind == "causal_lm" and args.max_new_tokens > most:
        raise UsageError(
            f"--max-new-tokens {args.max_new_tokens}: the explorer maps one window of the "
            f"model's context ({loaded.config.max_len} tokens); use at most {most}"
        )
    rows = args.beam if loaded.family.kind == "seq2seq" else 1
    device = next(loaded.model.parameters()).device
    check_decode_fits(loaded.config, rows, device, f"--beam {args.beam}")
    engine = ModelHost(loaded)
    try:
        result = engine.explore(
            args.text,
            beam=args.beam,
            nbest=min(args.nbest, args.beam),
            max_new_tokens=args.max_new_tokens,
            field="--text",
        )
    except RequestError as e:
        raise UsageError(str(e)) from None
    with atomic_file(args.out, option="--out", inputs=inputs) as tmp:
        write_page(tmp, result["explore"])
    print(f"wrote {args.out} ({engine.loaded.family.name}: {result['output']!r})")
    return 0


def _explore_classifier(args: argparse.Namespace, loaded: LoadedModel, inputs: list) -> int:
    """A text classifier's page: its self-attention and label probabilities."""
    from attnkit.cli.common import label_names
    from attnkit.data.classification import split_input_line
    from attnkit.evaluation.text_classification import encode_texts
    from attnkit.visualize.explorer import build_payload, write_page
    from attnkit.visualize.explorer.from_model import classifier_example

    first, second = split_input_line(args.text, "--text")
    encoded = encode_texts(loaded.tokenizer, [first], None if second is None else [second],
                           loaded.config.max_len)  # fmt: skip
    example = classifier_example(
        loaded.model, loaded.tokenizer, encoded.ids[0], encoded.types[0],
        label_names(loaded.config), title=f"{loaded.family.name} classifier",
    )  # fmt: skip
    with atomic_file(args.out, option="--out", inputs=inputs) as tmp:
        write_page(tmp, build_payload(example))
    print(f"wrote {args.out} (classifier: {example.output})")
    return 0
