"""Score a checkpoint on a test set: sacreBLEU (cased, detokenized), chrF,
tokenized lowercased BLEU (for comparison with published Multi30k numbers),
and perplexity of the references.

Example:
  attnkit evaluate --checkpoint runs/de_en --src test2016.de --ref test2016.en --json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

from attnkit.cli.common import add_device_argument
from attnkit.cli.translate import (
    add_decoding_arguments,
    check_decoding_arguments,
    configure_decoding,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", required=True, help="checkpoint or run directory")
    parser.add_argument("--src", required=True, help="source sentences, one per line")
    parser.add_argument("--ref", required=True, help="reference translations, one per line")
    add_decoding_arguments(parser)
    parser.add_argument(
        "--skip-empty", action="store_true", help="drop pairs with an empty source or reference"
    )
    parser.add_argument("--hyp-out", help="also write the translations to this file")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    add_device_argument(parser)


def reference_perplexity(model, tokenizer, pairs, batch_size: int = 64) -> float:
    """exp(mean NLL per target token, EOS included) of the references."""
    import torch
    import torch.nn.functional as F

    from attnkit.data.collate import collate_translation

    device = next(model.parameters()).device
    limit = model.config.max_len - 1
    enc = [(tokenizer.encode(s)[:limit], tokenizer.encode(t)[:limit]) for s, t in pairs]
    nll, n = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(enc), batch_size):
            b = collate_translation(
                enc[i : i + batch_size], tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id
            )
            b = b.to(device)
            logits = model(b.src, b.tgt_in).logits.float()
            nll += F.cross_entropy(
                logits.flatten(0, 1), b.tgt_out.flatten(), ignore_index=tokenizer.pad_id,
                reduction="sum",
            ).item()  # fmt: skip
            n += int((b.tgt_out != tokenizer.pad_id).sum())
    return math.exp(min(nll / max(n, 1), 50.0))


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path``, then rename it into place.

    An interrupted run leaves either the old file or the new one, never half of it.
    """
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def run(args: argparse.Namespace) -> int:
    from attnkit.data.readers import read_parallel
    from attnkit.decoding.text import translate_texts
    from attnkit.errors import DataError, UsageError
    from attnkit.evaluation.bleu import corpus_scores
    from attnkit.training.loading import load_translation_model

    check_decoding_arguments(args)
    if args.hyp_out:
        hyp_out = Path(args.hyp_out)
        if hyp_out.is_dir() or not hyp_out.parent.is_dir():
            raise UsageError(f"--hyp-out {hyp_out}: not a file in an existing directory")
    corpus = read_parallel(args.src, args.ref, skip_empty=args.skip_empty)
    if corpus.dropped_empty:
        print(
            f"attnkit evaluate: warning: skipped {corpus.dropped_empty} pair(s) with an empty side",
            file=sys.stderr,
        )
    pairs = list(corpus)
    if not pairs:
        raise DataError(f"{args.src}: no sentence pairs left to score")
    model, tokenizer = load_translation_model(args.checkpoint, args.device)
    configure_decoding(model, args)
    beam = 1 if args.greedy else args.beam
    start = time.perf_counter()
    hyps = translate_texts(
        model,
        tokenizer,
        [s for s, _ in pairs],
        beam=beam,
        alpha=args.alpha,
        batch_size=args.batch_size,
        max_len_b=args.max_len_b,
    )
    seconds = time.perf_counter() - start
    decode_path = "compiled" if args.compile else "reference" if args.no_fast else "fast"
    if args.hyp_out:
        write_atomically(Path(args.hyp_out), "".join(h + "\n" for h in hyps))
    scores = corpus_scores(hyps, [t for _, t in pairs])
    result = {
        **scores,
        "perplexity": reference_perplexity(model, tokenizer, pairs),
        "sentences": len(pairs),
        "decode": {"beam": beam, "alpha": args.alpha, "path": decode_path},
        "sentences_per_s": len(pairs) / max(seconds, 1e-9),
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"BLEU {scores['bleu']:.2f}   ({scores['bleu_signature']})")
    print(f"chrF {scores['chrf']:.2f}   ({scores['chrf_signature']})")
    print(f"tokenized lowercased BLEU {scores['bleu_lc']:.2f}")
    print(f"perplexity {result['perplexity']:.2f}   {len(pairs)} sentences, "
          f"{result['sentences_per_s']:.1f} sentences/s (beam {beam})")  # fmt: skip
    return 0
