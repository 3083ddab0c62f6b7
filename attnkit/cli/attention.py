"""Draw an attention heatmap.

Translation checkpoints: the sentence is translated (beam search), then
scored once more with the attention weights kept: each row is an output
token, each column a source token, and the colour is how much that output
looked at that source token (cross-attention). Language-model checkpoints
(decoder-only, encoder-only): the self-attention over the text; a text
classifier's over [CLS] text [SEP] (a text_a<TAB>text_b pair: [CLS] a [SEP] b
[SEP]), its predicted label in the title. Image
classifiers (--image digits:INDEX, a held-out digit, or an image file): the
class token's attention over the patches (with mean pooling, the attention
each patch receives), next to the image and overlaid on it. Choose a layer
(--layer, default the last) and a head (--head, default the mean of all heads).

Examples:
  attnkit attention --checkpoint quickstart-out --text "three hundred forty-two" --out a.png
  attnkit attention --checkpoint runs/vit_digits --image digits:0 --out map.png
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from attnkit.cli.argtypes import integer
from attnkit.cli.common import (
    CHECKPOINT_HELP,
    add_device_argument,
    add_precision_argument,
    check_decode_fits,
    checkpoint_inputs,
    load_for,
    named_checkpoint,
)
from attnkit.errors import UsageError
from attnkit.output_paths import atomic_file, check_output_file

if TYPE_CHECKING:
    from attnkit.models.swin import SwinConfig, SwinTransformer


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", required=True, help=CHECKPOINT_HELP)
    parser.add_argument("--text", help="text models: the source sentence (or text)")
    parser.add_argument(
        "--image", help="image classifiers: digits:INDEX (a held-out digit) or an image file"
    )
    parser.add_argument("--out", required=True, help="PNG file to write")
    parser.add_argument("--layer", type=integer, default=-1, help="layer (default: last)")
    parser.add_argument("--head", type=integer, default=None, help="head (default: mean of heads)")
    parser.add_argument("--beam", type=integer, default=4, help="beam size (default: 4)")
    add_precision_argument(parser)
    add_device_argument(parser)


def run(args: argparse.Namespace) -> int:
    from attnkit.cli.inference_args import plan_for
    from attnkit.inference import convert
    from attnkit.visualize.attention import (
        attention_for_text,
        attention_for_translation,
        plot_attention,
    )

    if args.beam < 1:
        raise UsageError(f"--beam must be >= 1, got {args.beam}")
    if not args.out.lower().endswith(".png"):
        raise UsageError(f"--out must name a .png file, got {args.out}")
    args.checkpoint = named_checkpoint(args.checkpoint)  # hf:ORG/NAME: imported once
    inputs = [*checkpoint_inputs(args.checkpoint), *([args.image] if args.image else [])]
    check_output_file(args.out, option="--out", inputs=inputs)  # before any work
    loaded = load_for("attention", args.checkpoint, args.device)
    model, tokenizer, config = loaded.model, loaded.tokenizer, loaded.config
    if loaded.family.kind == "seq2seq":
        check_decode_fits(config, args.beam, next(model.parameters()).device, f"--beam {args.beam}")
    # --precision's weights; the map's own decode then makes its stepper from the plan
    # (attnkit.visualize.attention), on the converted model
    convert(model, plan_for(loaded, args, "attention"))
    if loaded.family.kind == "image_classifier":
        if args.image is None or args.text is not None:
            raise UsageError("--image: an image classifier's map is drawn for an image, not text")
        return _image_map(args, model, config, inputs)
    if args.text is None or args.image is not None:
        raise UsageError("--text: a text model's map is drawn for text, not an image")
    if getattr(config, "attention", None) == "none":
        raise UsageError(
            f"{args.checkpoint}: this RNN model has no attention (model.attention: none); "
            "there is no map to draw"
        )
    seq2seq = loaded.family.kind == "seq2seq"
    # An RNN decoder has one attention (one "layer", one "head").
    layers = getattr(config, "num_decoder_layers" if seq2seq else "num_layers", 1)
    if not -layers <= args.layer < layers:
        raise UsageError(f"--layer must be in [{-layers}, {layers - 1}], got {args.layer}")
    heads = getattr(config, "num_heads", 1)
    if args.head is not None and not 0 <= args.head < heads:
        raise UsageError(f"--head must be in [0, {heads - 1}], got {args.head}")
    if seq2seq:
        weights, keys, queries = attention_for_translation(
            model, tokenizer, args.text, layer=args.layer, head=args.head, beam=args.beam
        )
        what = "cross-attention"
    elif getattr(config, "num_labels", 0) and getattr(config, "label_level", "") == "sequence":
        # a text classifier: [CLS] text [SEP], its label (a token head: the text's attention)
        from attnkit.cli.common import label_names
        from attnkit.visualize.attention import attention_for_classifier

        weights, keys, probs = attention_for_classifier(
            model, tokenizer, args.text, layer=args.layer, head=args.head
        )
        queries, top = keys, int(probs.argmax())
        what = f"label {label_names(config)[top]} ({float(probs[top]):.2f}); self-attention"
    else:
        try:
            weights, keys, queries = attention_for_text(
                model, tokenizer, args.text, layer=args.layer, head=args.head
            )
        except ValueError as e:
            raise UsageError(f"--{e}") from None
        what = "self-attention"
    which = "mean of heads" if args.head is None else f"head {args.head}"
    with atomic_file(args.out, option="--out", inputs=inputs) as tmp:
        plot_attention(
            weights, keys, queries, tmp, title=f"{what}, layer {args.layer % layers}, {which}"
        )
    print(f"wrote {args.out}")
    return 0


def _image_map(args: argparse.Namespace, model: Any, config: Any, inputs: list) -> int:
    """``--image``: the class token's attention over the patches, drawn on the image."""
    from attnkit.cli.common import image_for
    from attnkit.visualize.image_attention import patch_attention, plot_patch_attention

    if config.family == "swin":
        return _window_map(args, model, config)

    layers, heads = config.num_layers, config.num_heads
    if not -layers <= args.layer < layers:
        raise UsageError(f"--layer must be in [{-layers}, {layers - 1}], got {args.layer}")
    if args.head is not None and not 0 <= args.head < heads:
        raise UsageError(f"--head must be in [0, {heads - 1}], got {args.head}")
    image, label, name = image_for(args.image, config)
    attention = patch_attention(model, image, layer=args.layer, head=args.head)
    names = list(config.class_names) or [str(i) for i in range(config.num_classes)]
    top = int(attention.probs.argmax())
    truth = f", label {names[label]}" if label is not None else ""
    which = "mean of heads" if args.head is None else f"head {args.head}"
    kept = f", on itself {attention.self_weight:.2f}" if config.pooling == "cls" else ""
    title = (f"{name}: predicted {names[top]} ({float(attention.probs[top]):.2f}){truth}\n"
             f"layer {args.layer % layers}, {which}{kept}")  # fmt: skip
    with atomic_file(args.out, option="--out", inputs=inputs) as tmp:
        plot_patch_attention(image, attention, tmp, title=title)
    print(f"wrote {args.out} ({name}: predicted {names[top]}{truth})")
    return 0


def _window_map(args: argparse.Namespace, model: SwinTransformer, config: SwinConfig) -> int:
    """``--image`` on a Swin model: one block's window attention, its windows drawn."""
    from attnkit.cli.common import image_for
    from attnkit.visualize.window_attention import plot_window_attention, window_attention

    blocks = len(model.blocks())
    if not -blocks <= args.layer < blocks:
        raise UsageError(f"--layer must be in [{-blocks}, {blocks - 1}] (blocks), got {args.layer}")
    stage, _ = model.blocks()[args.layer]
    heads = config.num_heads[stage]
    if args.head is not None and not 0 <= args.head < heads:
        raise UsageError(f"--head must be in [0, {heads - 1}] for this block, got {args.head}")
    image, label, name = image_for(args.image, config)
    attention = window_attention(model, image, layer=args.layer, head=args.head)
    names = list(config.class_names) or [str(i) for i in range(config.num_classes)]
    top = int(attention.probs.argmax())
    truth = f", label {names[label]}" if label is not None else ""
    which = "mean of heads" if args.head is None else f"head {args.head}"
    title = (f"{name}: predicted {names[top]} ({float(attention.probs[top]):.2f}){truth}\n"
             f"block {args.layer % blocks}, {which}, weight received in each window")  # fmt: skip
    path = plot_window_attention(image, attention, args.out, title=title)
    print(f"wrote {path} ({name}: predicted {names[top]}{truth})")
    return 0
