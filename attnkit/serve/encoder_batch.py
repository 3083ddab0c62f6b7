"""Encoder-only checkpoints in dynamic batches: fill-mask, text classification, embeddings.

Concurrent ``/v1/fill-mask`` and ``/v1/classify`` requests are grouped by the
batcher as translations are (``attnkit.serve.batcher``: one batch kind each,
``attnkit.serve.routes.encoder``, the
token budget ``--max-batch-tokens`` and ``--max-batch-sentences``, at most
``--max-wait-ms`` of waiting) and run as one forward pass. The rows are
right-padded with the model's ``pad_id``, which the encoder masks out of
attention (and of mean pooling), so each row computes what it computes alone
(up to float rounding; the tests check probabilities within 1e-5).

A pass is not stepped, so it cannot stop midway: the requests cancelled
before it starts are left out of it (their results are ``None`` and never
handed back), and if every request of the batch is, it raises the first one's
``RequestCancelled`` without touching the model.

The fill-mask pass itself is ``ModelHost.fill_masks`` (``attnkit explore`` uses it
too); classification is here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from attnkit.data.classification import collate_examples, encode_example
from attnkit.serve.cancellable import live_requests
from attnkit.serve.handles import RequestHandle
from attnkit.serve.model_host import ModelHost, RequestError
from attnkit.serve.model_roles import labels_texts

__all__ = [
    "ClassifyJob",
    "EmbedJob",
    "classify",
    "embed",
    "encode_for_embedding",
    "encode_examples",
    "is_classifier",
    "label_names",
]


@dataclass(frozen=True)
class ClassifyJob:
    """One classify request: ``[CLS] a [SEP] (b [SEP])`` ids and token types per text."""

    ids: list[list[int]]
    types: list[list[int]]

    @property
    def tokens(self) -> int:
        return sum(len(x) for x in self.ids)


def is_classifier(engine: ModelHost) -> bool:
    """Whether ``engine`` holds an encoder-only checkpoint with a classification head."""
    return engine.is_encoder and labels_texts(engine.model.config)


def label_names(engine: ModelHost) -> list[str]:
    """The labels' names (from training), or their indices as strings."""
    config = engine.model.config
    return list(config.label_names) or [str(i) for i in range(config.num_labels)]


def encode_examples(
    engine: ModelHost, texts: Sequence[str], pairs: Sequence[str] | None
) -> ClassifyJob:
    """The ids of each example, as ``attnkit classify`` encodes them; one that does not fit
    the model's positions is a 422 naming it (the CLI cuts it instead, with a warning)."""
    tok = engine.tokenizer
    ids, types = [], []
    for i, text in enumerate(texts):
        a = tok.encode(text)
        b = tok.encode(pairs[i]) if pairs is not None else None
        seq, seg, cut = encode_example(a, b, bos_id=tok.bos_id, eos_id=tok.eos_id,
                                       max_len=engine.max_len)  # fmt: skip
        if cut:
            n = len(a) + (len(b) + 1 if b is not None else 0) + 2
            where = f"text[{i}]" if pairs is None else f"text[{i}] + text_pair[{i}]"
            raise RequestError(f"{where}: {n} tokens; the model reads at most {engine.max_len}")
        ids.append(seq)
        types.append(seg)
    return ClassifyJob(ids, types)


@torch.no_grad()
def classify(
    engine: ModelHost, jobs: Sequence[ClassifyJob], handles: Sequence[RequestHandle] | None = None
) -> list[list[list[float]] | None]:
    """Each request's label probabilities ``[text][label]``, every text of every request
    in one padded pass (module doc)."""
    from attnkit.evaluation.text_classification import classifier_logits

    live = live_requests(handles, len(jobs))
    results: list[list[list[float]] | None] = [None] * len(jobs)
    if not live:
        return results
    ids = [x for i in live for x in jobs[i].ids]
    types = [x for i in live for x in jobs[i].types]
    batch = collate_examples(ids, types, None, engine.tokenizer.pad_id).to(engine.device)
    logits = classifier_logits(engine.model, batch.ids, batch.token_types)
    probs = logits.float().softmax(-1).tolist()
    n = 0
    for i in live:
        k = len(jobs[i].ids)
        results[i], n = probs[n : n + k], n + k
    return results


@dataclass(frozen=True)
class EmbedJob:
    """One ``/v1/embeddings`` request: ``[CLS] text [SEP]`` ids per input."""

    ids: list[list[int]]

    @property
    def tokens(self) -> int:
        return sum(len(x) for x in self.ids)


def encode_for_embedding(engine: ModelHost, texts: Sequence[str], max_len: int) -> EmbedJob:
    """The ids of each input, cut to ``max_len`` as ``attnkit embed`` and
    sentence-transformers cut them (an embedding API embeds the start of a long text)."""
    tok = engine.tokenizer
    ids = []
    for text in texts:
        seq, _, _ = encode_example(tok.encode(text), None, bos_id=tok.bos_id,
                                   eos_id=tok.eos_id, max_len=max_len)  # fmt: skip
        ids.append(seq)
    return EmbedJob(ids)


@torch.no_grad()
def embed(
    engine: ModelHost,
    jobs: Sequence[EmbedJob],
    handles: Sequence[RequestHandle] | None = None,
    *,
    pooling: str = "mean",
    normalize: bool = True,
) -> list[list[list[float]] | None]:
    """Each request's vectors ``[input][dimension]``, every input of every request in one
    padded pass; pooling over each row's own tokens, so padding changes nothing."""
    import torch.nn.functional as F

    from attnkit.evaluation.embeddings import pool_tokens

    live = live_requests(handles, len(jobs))
    results: list[list[list[float]] | None] = [None] * len(jobs)
    if not live:
        return results
    ids = [x for i in live for x in jobs[i].ids]
    batch = collate_examples(ids, None, None, engine.tokenizer.pad_id).to(engine.device)
    lengths = torch.tensor([len(x) for x in ids], device=engine.device)
    real = torch.arange(batch.ids.size(1), device=engine.device)[None, :] < lengths[:, None]
    hidden = engine.model(batch.ids, mlm=False, classify=False).hidden
    vectors = pool_tokens(hidden, real, pooling).float()
    if normalize:
        vectors = F.normalize(vectors, dim=-1)
    rows = vectors.tolist()
    n = 0
    for i in live:
        k = len(jobs[i].ids)
        results[i], n = rows[n : n + k], n + k
    return results
