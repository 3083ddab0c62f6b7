"""``attnkit evaluate --labelled FILE`` for token-classification checkpoints (entity tags).

Not a command: ``attnkit.cli.evaluate`` calls it. The file is read as
``task: token_classification`` reads its data (CoNLL or JSONL, the tag scheme
detected); the scores are seqeval's entity-level precision, recall and F1
(micro, 0-1) and the same per entity type
(``attnkit.evaluation.token_classification``).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from attnkit.checkpoints.loading import LoadedModel


def score_tagged(loaded: LoadedModel, path: str, batch_size: int) -> dict[str, object]:
    """Entity scores of ``loaded`` (a tagger) on the tagged file ``path``."""
    from attnkit.data.token_tags import encode_words, read_tagged, word_labels
    from attnkit.evaluation.token_classification import entity_scores, predict_tags

    data = read_tagged(path)
    names = list(loaded.config.label_names)
    gold_ids = data.tag_ids(names)  # a tag the model does not know: an error naming the line
    tokenizer = loaded.tokenizer
    start = time.perf_counter()
    encoded = encode_words(tokenizer, data.words, loaded.config.max_len)
    gold = word_labels(encoded, gold_ids)
    predicted = predict_tags(loaded.model, encoded, data.words, names, pad_id=tokenizer.pad_id,
                             batch_size=batch_size, gold=gold)  # fmt: skip
    scores = entity_scores(data.tags, predicted.tags)
    return {**scores, "loss": predicted.loss, "sentences": len(data),
            "words": sum(len(w) for w in data.words), "scheme": data.scheme,
            "truncated": encoded.truncated,
            "seconds": round(time.perf_counter() - start, 2)}  # fmt: skip


def summary_line(result: dict[str, Any], path: str) -> str:
    """One line: micro F1, precision, recall, then F1 per type."""
    types = "  ".join(f"{k} {v['f1']:.4f}" for k, v in result["per_type"].items())
    return (f"entity F1 {result['f1']:.4f}   precision {result['precision']:.4f}   recall "
            f"{result['recall']:.4f}   ({result['sentences']} sentences of {path}; per type: "
            f"{types})")  # fmt: skip
