"""Token classifiers (named entities): predict each word's tag, score entities.

One place for the token-classification task's validation, ``attnkit tag``,
``attnkit evaluate --labelled`` and the server's ``/v1/tag``. A word's tag is
the label scored highest on its first sub-token (``attnkit.data.token_tags``);
a word past ``max_len`` (its sentence was cut) is tagged ``O``. Predictions are
BIO with a stray ``I-`` read as starting an entity, as conlleval does.

Scores (``entity_scores``) are seqeval's, entity level, in its default
(conlleval-compatible) mode: an entity counts as found when its type and its
exact span match; micro ``precision``, ``recall`` and ``f1`` over all types,
and the same per type with its ``support`` (gold entities).

Shapes: ``B`` batch, ``S`` length, ``K`` labels.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnkit.data.classification import sorted_batches
from attnkit.data.tag_schemes import to_bio
from attnkit.data.token_tags import IGNORE, EncodedWords, collate_words
from attnkit.errors import UsageError


def token_logits(model: nn.Module, ids: Tensor) -> Tensor:
    """``(B, S, K)`` tag scores of an encoder-only token classifier (no MLM head computed)."""
    out: Any = model(ids, mlm=False)
    logits: Tensor = out.token_logits
    return logits


@dataclass
class Predicted:
    """Each word's BIO tag, and the mean NLL of the gold tags when they were given."""

    tags: list[list[str]]
    loss: float | None = None


@torch.no_grad()
def predict_tags(
    model: nn.Module,
    encoded: EncodedWords,
    words: Sequence[Sequence[str]],
    names: Sequence[str],
    *,
    pad_id: int,
    batch_size: int = 64,
    gold: Sequence[Sequence[int]] | None = None,
) -> Predicted:
    """Each word's BIO tag (module doc), in the sentences' order; with ``gold`` (per-position
    labels, ``token_tags.word_labels``) also the mean NLL of the gold tags of the kept words.

    Runs in eval mode (the model's mode is restored), in length-sorted batches
    of ``batch_size`` sentences on the model's device.
    """
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    tags: list[list[str]] = [[] for _ in encoded.ids]
    nll, scored = 0.0, 0
    for rows in sorted_batches(encoded.lengths, batch_size):
        labels = [gold[i] for i in rows] if gold is not None else None
        batch = collate_words([encoded.ids[i] for i in rows], labels, pad_id).to(device)
        logits = token_logits(model, batch.ids).float()
        if batch.labels is not None:
            flat = batch.labels.reshape(-1)
            nll += float(F.cross_entropy(logits.reshape(flat.numel(), -1), flat,
                                         ignore_index=IGNORE, reduction="sum"))  # fmt: skip
            scored += int((flat != IGNORE).sum())
        best = logits.argmax(-1).cpu()
        for row, i in enumerate(rows):
            starts = encoded.first[i]
            found = [names[int(best[row, p])] if p >= 0 else "O" for p in starts]
            found += ["O"] * (len(words[i]) - len(starts))  # words past the cut
            tags[i] = to_bio(found, "bio")
    model.train(was_training)
    return Predicted(tags, nll / max(scored, 1) if gold is not None else None)


def entity_scores(
    gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]
) -> dict[str, Any]:
    """seqeval's entity-level ``precision``, ``recall``, ``f1`` (micro, 0-1) and ``per_type``
    ``{type: {precision, recall, f1, support}}`` of BIO tag sequences."""
    try:
        from seqeval.metrics import classification_report
    except ImportError:
        raise UsageError(
            "entity scores need seqeval: pip install seqeval (in attnkit's train extra)"
        ) from None
    report = classification_report(
        [list(g) for g in gold], [list(p) for p in predicted], output_dict=True, zero_division=0
    )
    micro = report.get("micro avg", {"precision": 0.0, "recall": 0.0, "f1-score": 0.0})
    per_type = {
        kind: {"precision": float(r["precision"]), "recall": float(r["recall"]),
               "f1": float(r["f1-score"]), "support": int(r["support"])}
        for kind, r in sorted(report.items()) if not kind.endswith(" avg")
    }  # fmt: skip
    return {
        "precision": float(micro["precision"]),
        "recall": float(micro["recall"]),
        "f1": float(micro["f1-score"]),
        "per_type": per_type,
    }


def is_tagger(config: object) -> bool:
    """Whether ``config`` is a token classifier of entity tags (its labels include ``O``),
    not another token-level head (an extractive QA model's start and end)."""
    return getattr(config, "label_level", "sequence") == "token" and "O" in tuple(
        getattr(config, "label_names", ())
    )
