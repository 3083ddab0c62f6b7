"""Text classifiers: encode examples, predict label probabilities, score them.

One place for the text-classification task's validation, ``attnkit classify``
and ``attnkit evaluate --labelled``. Scores: accuracy, macro-F1 (the F1 of
each label, averaged with equal weight: a classifier that always answers the
majority label scores high accuracy and low macro-F1) and the mean negative
log-likelihood of the true labels.

Shapes: ``N`` examples, ``K`` labels, ``B`` batch, ``S`` length.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnkit.data.classification import collate_examples, encode_example, sorted_batches
from attnkit.data.tokenizers import Tokenizer


@dataclass
class EncodedExamples:
    """Token ids and token types of examples, and how many were cut to ``max_len``."""

    ids: list[list[int]]
    types: list[list[int]]
    truncated: int
    pairs: bool  # sentence pairs (token types 1 exist)

    @property
    def lengths(self) -> list[int]:
        return [len(x) for x in self.ids]


def encode_texts(
    tokenizer: Tokenizer, texts: Sequence[str], pairs: Sequence[str] | None, max_len: int
) -> EncodedExamples:
    """``[CLS] a [SEP] (b [SEP])`` for every example (``attnkit.data.classification``)."""
    first = tokenizer.encode_batch(list(texts))
    second = tokenizer.encode_batch(list(pairs)) if pairs is not None else None
    ids, types, truncated = [], [], 0
    for i, a in enumerate(first):
        seq, seg, cut = encode_example(
            a, None if second is None else second[i],
            bos_id=tokenizer.bos_id, eos_id=tokenizer.eos_id, max_len=max_len,
        )  # fmt: skip
        ids.append(seq)
        types.append(seg)
        truncated += cut
    return EncodedExamples(ids, types, truncated, pairs is not None)


def classifier_logits(model: nn.Module, ids: Tensor, token_types: Tensor | None) -> Tensor:
    """``(B, K)`` class scores of an encoder-only classifier (no MLM head computed)."""
    if token_types is not None and getattr(model.config, "type_vocab_size", 0) == 0:
        token_types = None  # a model without segment embeddings tells pairs apart by [SEP]
    out: Any = model(ids, mlm=False, token_types=token_types)
    return out.class_logits


@torch.no_grad()
def predict_probs(
    model: nn.Module, examples: EncodedExamples, *, pad_id: int, batch_size: int = 64
) -> Tensor:
    """``(N, K)`` label probabilities (fp32, CPU), in the examples' order.

    Runs in eval mode (the model's mode is restored), in length-sorted
    batches of ``batch_size`` (the least padding) on the model's device.
    """
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    probs: list[Tensor] = []
    order: list[int] = []
    for rows in sorted_batches(examples.lengths, batch_size):
        batch = collate_examples(
            [examples.ids[i] for i in rows],
            [examples.types[i] for i in rows] if examples.pairs else None,
            None,
            pad_id,
        ).to(device)
        logits = classifier_logits(model, batch.ids, batch.token_types)
        probs.append(logits.float().softmax(-1).cpu())
        order += rows
    model.train(was_training)
    if not order:
        return torch.zeros(0, 0)
    result = torch.empty(len(order), probs[0].size(-1))
    result[torch.tensor(order)] = torch.cat(probs)
    return result


def macro_f1(predictions: Tensor, labels: Tensor, num_labels: int) -> float:
    """The unweighted mean over labels of F1 = 2 TP / (2 TP + FP + FN).

    A label that neither occurs nor is predicted is left out of the mean (its
    F1 is undefined), as scikit-learn does with ``labels`` not given.
    """
    scores = []
    for k in range(num_labels):
        predicted, actual = predictions == k, labels == k
        tp = int((predicted & actual).sum())
        denominator = int(predicted.sum()) + int(actual.sum())
        if denominator:
            scores.append(2 * tp / denominator)
    return sum(scores) / len(scores) if scores else 0.0


def classification_metrics(probs: Tensor, labels: Tensor) -> dict[str, float]:
    """``accuracy``, ``macro_f1`` and ``loss`` (mean NLL) of ``probs`` ``(N, K)`` for ``labels``."""
    labels = labels.to(probs.device)
    predictions = probs.argmax(-1)
    nll = F.nll_loss(probs.clamp_min(1e-12).log(), labels, reduction="mean")
    return {
        "accuracy": float((predictions == labels).float().mean()),
        "macro_f1": macro_f1(predictions, labels, probs.size(-1)),
        "loss": float(nll),
    }
