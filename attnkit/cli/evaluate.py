"""Score a checkpoint on a test set.

Translation checkpoints (--src and --ref): sacreBLEU (cased, detokenized),
chrF, tokenized lowercased BLEU (for comparison with published Multi30k
numbers), and the perplexity of the references.

Language-model checkpoints (--text, one UTF-8 file): the mean loss per scored
token and the perplexity, over blocks of the model's context (or of --context
tokens: longer than trained works for sinusoidal, rotary, ALiBi and relative
positions, not for a learned position table); a masked LM predicts 15% of the
tokens (masked 80/10/10 with --seed).

Text classifiers (--labelled, a TSV or JSONL file of labelled texts or
sentence pairs, as ``task: text_classification`` reads them): accuracy,
macro-F1, cross-entropy and per-label accuracy; labels are mapped through the
label names saved in the checkpoint.

Token classifiers (--labelled, a CoNLL or JSONL file of tagged sentences, as
``task: token_classification`` reads them): seqeval's entity-level precision,
recall and F1 (micro, 0-1) and the same per entity type.
Extractive QA checkpoints (--labelled, a SQuAD JSON or JSONL file, as ``task:
question_answering`` reads them): SQuAD's exact match and F1, in percent.
Summarizers (--labelled, a JSONL file of {"text", "summary"} or a TSV file of
text<TAB>summary, as ``task: summarization`` reads them; an encoder-decoder or
a decoder-only checkpoint): ROUGE-1/2/L F-measures (0-100, stemmed, as
``rouge-score`` computes them) of its summaries (``attnkit summarize``'s).

Image classifiers (--images): accuracy, cross-entropy and per-class accuracy
on ``digits`` (the 359 held-out digits of the fixed split) or a folder of
images with a labels CSV (--labels, default FOLDER/labels.csv; labels are
mapped through the class names saved in the checkpoint).

Examples:
  attnkit evaluate --checkpoint runs/de_en --src test2016.de --ref test2016.en --json
  attnkit evaluate --checkpoint runs/shakespeare --text held_out.txt
  attnkit evaluate --checkpoint runs/shakespeare --text held_out.txt --context 512
  attnkit evaluate --checkpoint runs/vit_digits --images digits
  attnkit evaluate --checkpoint runs/sst2 --labelled data/sst2/dev.tsv
  attnkit evaluate --checkpoint runs/ner --labelled data/conll2003/valid.txt --json
  attnkit evaluate --checkpoint runs/squad --labelled data/squad/valid.json --json
  attnkit evaluate --checkpoint runs/aeslc --labelled data/aeslc/validation.jsonl --json
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attnkit import jsonio
from attnkit.cli import labelled_scores
from attnkit.cli.argtypes import integer, seed
from attnkit.cli.common import (
    CHECKPOINT_HELP,
    add_device_argument,
    check_decode_fits,
    check_input_file,
    checkpoint_inputs,
    load_for,
    named_checkpoint,
)
from attnkit.cli.inference_args import (
    add_decoding_arguments,
    check_decoding_arguments,
    decode_path,
    engine_options,
)
from attnkit.errors import UsageError
from attnkit.evaluation.question_answering import is_qa_config
from attnkit.output_paths import check_output_file, write_text

if TYPE_CHECKING:
    from attnkit.checkpoints.loading import LoadedModel


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", required=True, help=CHECKPOINT_HELP)
    parser.add_argument("--src", help="translation: source sentences, one per line")
    parser.add_argument("--ref", help="translation: reference translations, one per line")
    parser.add_argument("--text", help="language models: a UTF-8 text file to score")
    parser.add_argument(
        "--images", help="image classifiers: 'digits' (held out) or a folder of images"
    )
    parser.add_argument("--labels", help="with --images FOLDER: its labels CSV")
    parser.add_argument(
        "--labelled",
        help="text classifiers: a TSV or JSONL file of labelled examples; token classifiers: "
        "a CoNLL or JSONL file of tagged sentences; question answering: SQuAD JSON or JSONL; "
        "sentence embeddings: scored sentence pairs; summarizers: "
        'JSONL of {"text", "summary"} (or TSV text<TAB>summary)',
    )
    add_decoding_arguments(parser)
    parser.add_argument(
        "--skip-empty", action="store_true", help="drop pairs with an empty source or reference"
    )
    parser.add_argument("--hyp-out", help="also write the translations to this file")
    parser.add_argument("--seed", type=seed, default=0, help="masked LMs: masking seed")
    parser.add_argument(
        "--context",
        type=integer,
        help="language models: tokens per scored block (default: max_len)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    add_device_argument(parser)


# The checkpoint kinds whose --labelled file is (text, summary) pairs.
SUMMARIZERS = ("seq2seq", "causal_lm")


def _inputs(args: argparse.Namespace) -> list[str | Path]:
    """What evaluate reads, which --hyp-out must never replace."""
    given = [args.src, args.ref, args.text, args.labels]
    return [p for p in given if p] + checkpoint_inputs(args.checkpoint)


def _check_inputs(args: argparse.Namespace, kind: str, config: object = None) -> None:
    if kind == "image_classifier":
        if not args.images:
            raise UsageError("--images: an image classifier is scored on 'digits' or a folder")
        if args.text or args.src or args.ref:
            raise UsageError("--text/--src/--ref: for text models; give --images here")
        return
    if args.images or args.labels:
        raise UsageError("--images/--labels: for image classifiers")
    if args.labelled:
        summarizer = kind in SUMMARIZERS
        if not summarizer and kind != "masked_lm":
            raise UsageError("--labelled: for encoder-only checkpoints (text classifiers, "
                             "taggers, QA, sentence embeddings) and summarizers "
                             "(task: summarization)")  # fmt: skip
        if args.text or args.src or args.ref:
            raise UsageError("--text/--src/--ref: not with --labelled")
        return
    if kind == "seq2seq":
        if not (args.src and args.ref):
            raise UsageError("--src and --ref: a translation checkpoint is scored on both")
        if args.text:
            raise UsageError("--text: for language models; give --src and --ref here")
        if args.context is not None:
            raise UsageError("--context: for language models (--text), not translation")
    else:
        if not args.text:
            raise UsageError(f"--text: a {kind} checkpoint is scored on a text file")
        if args.src or args.ref:
            raise UsageError("--src/--ref: for translation checkpoints; give --text here")


def _score_text(loaded: LoadedModel, args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from attnkit.data.readers import read_text
    from attnkit.errors import DataError
    from attnkit.evaluation.perplexity import mlm_special_ids, text_perplexity

    tokenizer, model = loaded.tokenizer, loaded.model
    context = model.config.max_len if args.context is None else args.context
    if context < 1:
        raise UsageError(f"--context must be >= 1, got {context}")
    ids = torch.tensor(tokenizer.encode(read_text(args.text)), dtype=torch.long)
    if ids.numel() <= context:  # before a longer model is built for nothing
        raise DataError(
            f"{args.text}: {ids.numel()} tokens are too few for one block of {context} + 1; "
            "use a longer text (or a smaller --context)"
        )
    model = with_context(model, context)
    masked = loaded.family.kind == "masked_lm"
    start = time.perf_counter()
    metrics = text_perplexity(model, ids, masked=masked, batch_size=args.batch_size,
                              seed=args.seed, block_size=context,
                              special_ids=mlm_special_ids(tokenizer))  # fmt: skip
    return {"loss": metrics["loss"], "perplexity": metrics["ppl"], "tokens": int(metrics["tokens"]),
            "objective": "masked_lm" if masked else "causal_lm", "context": context,
            "seconds": round(time.perf_counter() - start, 2)}  # fmt: skip


def _score_images(loaded: LoadedModel, args: argparse.Namespace) -> dict[str, object]:
    from attnkit.cli.common import images_for
    from attnkit.evaluation.accuracy import classification_scores

    config = loaded.config
    data, name = images_for(args.images, args.labels, config)
    start = time.perf_counter()
    scores = classification_scores(
        loaded.model, data.images, data.labels, num_classes=config.num_classes,
        batch_size=args.batch_size,
    )  # fmt: skip
    per_class = {
        c: round(right / total, 4)
        for c, right, total in zip(data.classes, scores.class_correct, scores.class_total)
        if total
    }
    return {"accuracy": scores.accuracy, "correct": scores.correct, "images": scores.total,
            "loss": scores.nll, "per_class_accuracy": per_class, "data": name,
            "seconds": round(time.perf_counter() - start, 2)}  # fmt: skip


def with_context(model: Any, context: int) -> Any:
    """``model``, rebuilt with ``max_len=context`` when that is longer than it was trained for.

    Sinusoidal, rotary, ALiBi and Shaw's clipped relative positions have no
    weights that depend on ``max_len`` (their tables are computed), so the
    same weights load into the longer model; a learned position table has
    exactly ``max_len`` rows, and there is nothing to read past it.
    """
    from attnkit.checkpoints.loading import build_for_loading

    config = model.config
    if context < 1:
        raise UsageError(f"--context must be >= 1, got {context}")
    if context <= config.max_len:
        return model
    if config.absolute_positions == "learned":
        raise UsageError(
            f"--context {context}: this model's learned position table has {config.max_len} "
            f"rows (positions: {config.positions}); it cannot read past position {config.max_len}"
        )
    from attnkit.memory_estimates import model_bytes, require

    longer_config = config.replace(max_len=context)
    device = next(model.parameters()).device
    need = model_bytes(longer_config, build_for_loading)
    require(need, f"--context {context}: the model", device=device, error=UsageError)
    longer = build_for_loading(longer_config)
    longer.load_state_dict(model.state_dict(), strict=True)
    return longer.to(device).eval()


def _score_translation(
    loaded: LoadedModel, args: argparse.Namespace, corpus: Any
) -> dict[str, Any]:
    from attnkit.attention.backends import REFERENCE, use_backend
    from attnkit.cli.inference_args import decode_options, engine_from_args, stepper_from_args
    from attnkit.decoding.text import translate_texts
    from attnkit.errors import DataError
    from attnkit.evaluation.bleu import corpus_scores
    from attnkit.evaluation.perplexity import perplexity, translation_sums

    if corpus.dropped_empty:
        print(
            f"attnkit evaluate: warning: skipped {corpus.dropped_empty} pair(s) with an empty side",
            file=sys.stderr,
        )
    pairs = list(corpus)
    if not pairs:
        raise DataError(f"{args.src}: no sentence pairs left to score")
    model, tokenizer = loaded.model, loaded.tokenizer
    beam = 1 if args.greedy else args.beam
    sources = [s for s, _ in pairs]
    precision = args.precision  # what ran: the plan's own (an int4 checkpoint runs as int4)
    if args.engine != "attnkit":
        engine = engine_from_args(args, "evaluate", loaded)
        start = time.perf_counter()
        hyps = [best for best, *_ in engine.translate(sources, decode_options(args))]
        seconds = time.perf_counter() - start
    else:
        rows = beam * min(args.batch_size, len(pairs))
        check_decode_fits(model.config, rows, next(model.parameters()).device,
                          f"--beam {beam} with --batch-size {args.batch_size}")  # fmt: skip
        stepper, plan = stepper_from_args(loaded, args, "evaluate")
        precision = plan.precision
        start = time.perf_counter()
        hyps = translate_texts(model, tokenizer, sources, beam=beam, alpha=args.alpha,
                               batch_size=args.batch_size, max_len_b=args.max_len_b,
                               stepper=stepper, search=plan.search)  # fmt: skip
        seconds = time.perf_counter() - start
    if args.hyp_out:
        write_text(args.hyp_out, "".join(h + "\n" for h in hyps), option="--hyp-out",
                   inputs=_inputs(args))  # fmt: skip
    # The decode left its backend on the attention modules (OneQueryDecode on the CPU);
    # the references are scored with the reference kernel whatever decoded, so the
    # perplexity is the same figure under every --engine and decoding path.
    use_backend(model, REFERENCE)
    _, nll, n_tokens = translation_sums(model, tokenizer, pairs)
    return {
        **corpus_scores(hyps, [t for _, t in pairs]),
        "perplexity": perplexity(nll, max(n_tokens, 1)),
        "sentences": len(pairs),
        "decode": {
            "engine": args.engine,
            "beam": beam,
            "alpha": args.alpha,
            "path": decode_path(args),
            "precision": precision,
        },  # fmt: skip
        "sentences_per_s": len(pairs) / max(seconds, 1e-9),
    }


def run(args: argparse.Namespace) -> int:
    check_decoding_arguments(args)
    if args.engine != "attnkit":  # a refused option fails before anything loads
        engine_options(args)
    if args.hyp_out:  # before any work: never a device, a directory or an input
        check_output_file(args.hyp_out, option="--hyp-out", inputs=_inputs(args))
    for option in ("src", "ref", "text", "labelled"):
        check_input_file(getattr(args, option), f"--{option}")
    corpus = None
    if args.src and args.ref:  # bad test files fail before the model loads
        from attnkit.data.readers import read_parallel

        corpus = read_parallel(args.src, args.ref, skip_empty=args.skip_empty)
    args.checkpoint = named_checkpoint(args.checkpoint)  # hf:ORG/NAME: imported once
    # Another engine runs on the CPU, and converts (on a cache miss) from a CPU model.
    device = args.device if args.engine == "attnkit" else "cpu"
    loaded = load_for("evaluate", args.checkpoint, device)
    _check_inputs(args, loaded.family.kind, loaded.config)
    if args.engine != "attnkit" and loaded.family.kind != "seq2seq":
        raise UsageError(f"--engine {args.engine}: for translation checkpoints (--src/--ref)")
    if args.labelled and loaded.family.kind in SUMMARIZERS:
        from attnkit.data.summaries import read_labelled_summaries

        pairs = read_labelled_summaries(args.labelled, skip_empty=args.skip_empty)
        result = labelled_scores.score_summaries_of(loaded, args, pairs, _inputs(args))
        if args.json:
            print(jsonio.dumps(result, indent=2))
        else:
            print(f"ROUGE-1 {result['rouge1']:.2f}   ROUGE-2 {result['rouge2']:.2f}   "
                  f"ROUGE-L {result['rougeL']:.2f}   ({result['examples']} examples of "
                  f"{args.labelled}, beam {result['beam']})")  # fmt: skip
        return 0
    if args.labelled:
        from attnkit.cli.inference_args import plan_for
        from attnkit.inference import convert

        convert(loaded.model, plan_for(loaded, args, "evaluate"))  # --precision's weights
        from attnkit.evaluation.token_classification import is_tagger

        if is_tagger(loaded.config):  # named entities: seqeval's entity scores
            from attnkit.cli.score_tags import score_tagged, summary_line

            result = score_tagged(loaded, args.labelled, args.batch_size)
            print(
                jsonio.dumps(result, indent=2) if args.json else summary_line(result, args.labelled)
            )
            return 0
        if is_qa_config(loaded.config):
            return labelled_scores.print_qa(loaded, args)
        if not getattr(loaded.config, "num_labels", 0):  # no head: sentence embeddings
            result = labelled_scores.score_pairs(loaded, args)
            if args.json:
                print(jsonio.dumps(result, indent=2))
            else:
                print(f"spearman {result['spearman']:.4f}   pearson {result['pearson']:.4f}   "
                      f"({result['pairs']} scored pairs of {args.labelled})")  # fmt: skip
            return 0
        result = labelled_scores.score_labelled(loaded, args)
        if args.json:
            print(jsonio.dumps(result, indent=2))
        else:
            print(f"accuracy {result['accuracy']:.4f}   macro-F1 {result['macro_f1']:.4f}   "
                  f"({result['correct']}/{result['examples']} examples of {args.labelled}, "
                  f"cross-entropy {result['loss']:.4f})")  # fmt: skip
        return 0
    if loaded.family.kind == "image_classifier":
        result = _score_images(loaded, args)
        if args.json:
            print(jsonio.dumps(result, indent=2))
        else:
            print(f"accuracy {result['accuracy']:.4f}   ({result['correct']}/{result['images']} "
                  f"images of {result['data']}, cross-entropy {result['loss']:.4f})")  # fmt: skip
        return 0
    if loaded.family.kind != "seq2seq":
        from attnkit.cli.inference_args import plan_for
        from attnkit.inference import convert

        convert(loaded.model, plan_for(loaded, args, "evaluate"))  # --precision's weights
        result = _score_text(loaded, args)
        if args.json:
            print(jsonio.dumps(result, indent=2))
        else:
            objective = result["objective"].replace("_", " ")
            print(f"loss {result['loss']:.4f}   perplexity {result['perplexity']:.2f}   "
                  f"({result['tokens']} {objective} tokens scored)")  # fmt: skip
        return 0
    result = _score_translation(loaded, args, corpus)
    if args.json:
        print(jsonio.dumps(result, indent=2))
        return 0
    print(f"BLEU {result['bleu']:.2f}   ({result['bleu_signature']})")
    print(f"chrF {result['chrf']:.2f}   ({result['chrf_signature']})")
    print(f"tokenized lowercased BLEU {result['bleu_lc']:.2f}")
    speed, beam = result["sentences_per_s"], result["decode"]["beam"]
    print(f"perplexity {result['perplexity']:.2f}   {result['sentences']} sentences, "
          f"{speed:.1f} sentences/s (beam {beam}, {result['decode']['precision']}, "
          f"{args.engine})")  # fmt: skip
    return 0
