"""Fill in masked tokens with a masked-LM (BERT-style) checkpoint.

Write [MASK] (or --mask-token) where a token is missing; each mask is
predicted from both sides at once. Prints the text with the best guess in
every mask, then each mask's --top-k candidates with their probabilities.

Example:
  attnkit fill-mask --checkpoint runs/shakespeare_mlm --text "To be, or not to b[MASK]"
"""

from __future__ import annotations

import argparse
from typing import cast

from attnkit.cli.argtypes import integer
from attnkit.cli.common import CHECKPOINT_HELP, add_device_argument, load_for, named_checkpoint
from attnkit.errors import UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", required=True, help=CHECKPOINT_HELP)
    parser.add_argument("--text", required=True, help="text with one or more [MASK] tokens")
    parser.add_argument("--top-k", type=integer, default=5, help="candidates per mask (default: 5)")
    parser.add_argument(
        "--mask-token", default="[MASK]", help="the marker of a missing token (default: [MASK])"
    )
    add_device_argument(parser)


def encode_with_masks(tokenizer, text: str, marker: str, mask_id: int) -> list[int]:
    """Token ids of ``text`` with ``mask_id`` wherever ``marker`` stands."""
    pieces = text.split(marker)
    ids: list[int] = []
    for i, piece in enumerate(pieces):
        ids += tokenizer.encode(piece) if piece else []
        if i < len(pieces) - 1:
            ids.append(mask_id)
    return ids


def run(args: argparse.Namespace) -> int:
    import torch

    if args.top_k < 1:
        raise UsageError(f"--top-k must be >= 1, got {args.top_k}")
    if not args.mask_token:
        raise UsageError("--mask-token must not be empty")
    if args.mask_token not in args.text:
        raise UsageError(f"--text holds no {args.mask_token}; mark the missing token(s) with it")
    args.checkpoint = named_checkpoint(args.checkpoint)  # hf:ORG/NAME: imported once
    from torch import nn

    from attnkit.cli.inference_args import plan_for
    from attnkit.inference import prepare

    loaded = load_for("fill-mask", args.checkpoint, args.device)
    # no --precision: the weights as loaded (the plan decides nothing else for a masked LM)
    model = cast(nn.Module, prepare(loaded, plan_for(loaded, args, "fill-mask", convert=False)))
    tokenizer, config = loaded.tokenizer, loaded.config
    ids = encode_with_masks(tokenizer, args.text, args.mask_token, config.mask_id)
    if len(ids) > config.max_len:
        raise UsageError(
            f"--text is {len(ids)} tokens long; the model reads at most {config.max_len}"
        )
    device = next(model.parameters()).device
    with torch.no_grad():
        logits = model(torch.tensor([ids], device=device), classify=False).mlm_logits[0]
    # Only the tokenizer's own ids can be shown (the mask id is the model's extra row).
    logits[:, tokenizer.vocab_size :] = float("-inf")
    probs = logits.float().softmax(-1)
    filled = list(ids)
    lines = []
    for n, pos in enumerate(i for i, t in enumerate(ids) if t == config.mask_id):
        top = probs[pos].topk(min(args.top_k, tokenizer.vocab_size))
        filled[pos] = int(top.indices[0])
        cands = ", ".join(
            f"{tokenizer.decode([int(i)])!r} {float(p):.3f}"
            for p, i in zip(top.values, top.indices)
        )
        lines.append(f"mask {n + 1}: {cands}")
    print(tokenizer.decode(filled))
    print("\n".join(lines))
    return 0
