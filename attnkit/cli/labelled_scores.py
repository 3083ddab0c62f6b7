"""``attnkit evaluate --labelled``: a labelled file scored in its task's own figures.

Text classifiers (accuracy, macro-F1), sentence embeddings (Spearman and Pearson of
scored pairs), extractive QA (SQuAD's exact match and F1) and summarizers (ROUGE).
Token classifiers are ``attnkit.cli.score_tags``. Not a command: ``cli/evaluate.py``
calls these after loading the checkpoint.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attnkit import jsonio
from attnkit.output_paths import write_text

if TYPE_CHECKING:
    from attnkit.checkpoints.loading import LoadedModel


def score_labelled(loaded: LoadedModel, args: argparse.Namespace) -> dict[str, object]:
    import torch

    from attnkit.cli.common import label_names
    from attnkit.data.classification import read_labelled
    from attnkit.evaluation.text_classification import (
        classification_metrics,
        encode_texts,
        predict_probs,
    )

    examples = read_labelled(args.labelled)
    names = label_names(loaded.config)
    labels = torch.tensor(examples.label_ids(names))
    tokenizer = loaded.tokenizer
    start = time.perf_counter()
    encoded = encode_texts(tokenizer, examples.texts, examples.pairs, loaded.config.max_len)
    probs = predict_probs(loaded.model, encoded, pad_id=tokenizer.pad_id,
                          batch_size=args.batch_size)  # fmt: skip
    metrics = classification_metrics(probs, labels)
    right = probs.argmax(-1) == labels
    per_label = {n: round(float(right[labels == k].float().mean()), 4)
                 for k, n in enumerate(names) if bool((labels == k).any())}  # fmt: skip
    return {**metrics, "correct": int(right.sum()), "examples": len(examples),
            "per_label_accuracy": per_label, "truncated": encoded.truncated,
            "seconds": round(time.perf_counter() - start, 2)}  # fmt: skip


def score_pairs(loaded: LoadedModel, args: argparse.Namespace) -> dict[str, object]:
    """Spearman and Pearson correlation of the embeddings' cosine similarity with the
    scores of a file of scored sentence pairs (``task: sentence_similarity``'s format)."""
    from attnkit.data.scored_pairs import read_scored_pairs
    from attnkit.errors import DataError
    from attnkit.evaluation.embeddings import embed_texts, similarity_scores
    from attnkit.interop.hf.pooling import embedding_settings

    pairs = read_scored_pairs(args.labelled)
    if pairs.scores is None:
        raise DataError(f"{args.labelled}: the pairs have no scores to correlate with")
    settings = embedding_settings(loaded.directory, loaded.config)
    start = time.perf_counter()
    options: dict[str, Any] = {
        "pooling": settings.pooling, "normalize": settings.normalize,
        "max_len": settings.max_len, "batch_size": args.batch_size,
    }  # fmt: skip
    a = embed_texts(loaded.model, loaded.tokenizer, pairs.first, **options)
    b = embed_texts(loaded.model, loaded.tokenizer, pairs.second, **options)
    scores = similarity_scores(a.vectors, b.vectors, pairs.scores)
    seconds = round(time.perf_counter() - start, 2)
    return {**scores, "pairs": len(pairs), "truncated": a.truncated + b.truncated,
            "data": str(args.labelled), "seconds": seconds}  # fmt: skip


def print_qa(loaded: LoadedModel, args: argparse.Namespace) -> int:
    """Score a QA checkpoint on a SQuAD file, in ``attnkit answer``'s default windows."""
    from attnkit.data.qa_windows import default_windows
    from attnkit.data.squad import read_squad
    from attnkit.evaluation.question_answering import predict_answers, qa_scores

    examples = read_squad(args.labelled)
    window, stride = default_windows(loaded.config.max_len)
    start = time.perf_counter()
    null = any(x.impossible for x in examples)
    answers = predict_answers(loaded.model, loaded.tokenizer, examples, max_len=window,
                              stride=stride, allow_null=null)  # fmt: skip
    result = {**qa_scores(answers, examples), "questions": len(examples),
              "seconds": round(time.perf_counter() - start, 2)}  # fmt: skip
    if args.json:
        print(jsonio.dumps(result, indent=2))
    else:
        print(f"exact match {result['exact_match']:.2f}   F1 {result['f1']:.2f}   "
              f"({len(examples)} questions of {args.labelled})")  # fmt: skip
    return 0


def score_summaries_of(
    loaded: LoadedModel, args: argparse.Namespace, pairs: Any, inputs: list[str | Path]
) -> dict[str, Any]:
    from attnkit.decoding.summaries import is_decoder_only
    from attnkit.evaluation.summaries import score_summaries
    from attnkit.inference import stepper_for

    beam = 1 if args.greedy or is_decoder_only(loaded.model) else args.beam
    result, hyps = score_summaries(loaded.model, loaded.tokenizer, pairs, beam=beam,
                                   alpha=args.alpha, batch_size=args.batch_size,
                                   stepper=stepper_for(loaded.model))  # fmt: skip
    if args.hyp_out:
        write_text(args.hyp_out, "".join(h + "\n" for h in hyps), option="--hyp-out",
                   inputs=inputs)  # fmt: skip
    return {**result, "beam": beam}
