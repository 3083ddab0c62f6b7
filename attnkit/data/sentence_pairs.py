"""Sentence pairs for BERT's next-sentence prediction (Devlin et al., 2019, §3.1 "Task #2").

A corpus is documents of sentences: one sentence per line, documents separated
by blank lines (a file without blank lines is one document). A pair is
``[CLS] A [SEP] B [SEP]`` with segment ids 0 for ``[CLS] A [SEP]`` and 1 for
``B [SEP]`` (``attnkit.data.classification.encode_example``: cut to
``max_len`` by trimming the longer sentence first). ``A`` is drawn among the
sentences that have a next one in their document. Half of a batch's pairs
(exactly ``n // 2``, the odd one by a coin) are NotNext: ``B`` is a random
sentence from another document (label 1), or, in a one-document corpus, any
sentence but ``A``'s next; the others are IsNext: ``B`` is the sentence that
follows ``A`` (label 0, as in Hugging Face's ``next_sentence_label``).

Held out (``split_pairs``): the last ``valid_fraction`` of the documents (of
the sentences, when there is one document), so no held-out pair shares a
document with training. ``[CLS]``/``[SEP]`` are the tokenizer's BOS/EOS ids
(an imported BERT vocabulary's ``[CLS]``/``[SEP]``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from attnkit.data.classification import encode_example
from attnkit.data.tokenizers import Tokenizer
from attnkit.errors import DataError

IS_NEXT, NOT_NEXT = 0, 1
LABEL_NAMES = ("is_next", "not_next")  # the NSP head's outputs, in label order


def split_documents(text: str) -> list[list[str]]:
    """Documents (blank-line separated) of sentences (non-empty lines, stripped)."""
    documents: list[list[str]] = [[]]
    for line in text.splitlines():
        line = line.strip()
        if line:
            documents[-1].append(line)
        elif documents[-1]:
            documents.append([])
    return [d for d in documents if d]


@dataclass
class PairBatch:
    """``n`` pairs: ``ids``/``types``, each pair's ``[CLS] A [SEP] B [SEP]`` ids and segment
    ids; ``labels``, IS_NEXT (0) or NOT_NEXT (1); ``a``/``b``, the sentence indices."""

    ids: list[list[int]]
    types: list[list[int]]
    labels: list[int]
    a: list[int]
    b: list[int]


class SentencePairs:
    """The encoded sentences of some documents, and random NSP pairs drawn from them.

    Attributes:
        sentences: every sentence's token ids (no specials), documents in order.
        document: each sentence's document index.
        firsts: the sentences that have a next one in their document (the possible A's).
    """

    def __init__(self, documents: Sequence[Sequence[Sequence[int]]], *, name: str = "data"):
        self.sentences = [list(s) for doc in documents for s in doc]
        self.document = [d for d, doc in enumerate(documents) for _ in doc]
        self.firsts = [
            i for i in range(len(self.sentences) - 1) if self.document[i] == self.document[i + 1]
        ]
        if not self.firsts:
            raise DataError(f"{name}: no document has two sentences; NSP needs pairs")
        self.single_document = len(documents) == 1
        starts = [0]
        for doc in documents:
            starts.append(starts[-1] + len(doc))
        self.doc_start = starts  # document d: sentences doc_start[d] .. doc_start[d + 1] - 1

    def sample(
        self, n: int, generator: torch.Generator, *, bos_id: int, eos_id: int, max_len: int
    ) -> PairBatch:
        """``n`` pairs, ``n // 2`` NotNext (plus a coin's for odd ``n``), from ``generator``."""
        draws = torch.rand(n, 3, generator=generator)
        not_next = n // 2 + int(n % 2 == 1 and bool(draws[0, 2] < 0.5))
        labels = (torch.randperm(n, generator=generator) < not_next).long().tolist()
        batch = PairBatch([], [], [], [], [])
        for (pick_a, pick_b, _), label in zip(draws.tolist(), labels):
            a = self.firsts[min(int(pick_a * len(self.firsts)), len(self.firsts) - 1)]
            b = a + 1 if label == IS_NEXT else self._random_other(a, pick_b)
            ids, types, _ = encode_example(
                self.sentences[a], self.sentences[b], bos_id=bos_id, eos_id=eos_id, max_len=max_len
            )
            batch.ids.append(ids)
            batch.types.append(types)
            batch.labels.append(label)
            batch.a.append(a)
            batch.b.append(b)
        return batch

    def _random_other(self, a: int, u: float) -> int:
        """A sentence from another document than ``a``'s (in one document: any but ``a + 1``)."""
        if self.single_document:
            b = min(int(u * (len(self.sentences) - 1)), len(self.sentences) - 2)
            return b if b < a + 1 else b + 1
        d = self.document[a]
        first, size = self.doc_start[d], self.doc_start[d + 1] - self.doc_start[d]
        others = len(self.sentences) - size
        b = min(int(u * others), others - 1)
        return b if b < first else b + size  # skip a's document (its sentences are contiguous)


def encode_documents(
    documents: Sequence[Sequence[str]], tokenizer: Tokenizer
) -> list[list[list[int]]]:
    """Each sentence's token ids (no specials), encoded in one batch, grouped as given."""
    flat = tokenizer.encode_batch([s for doc in documents for s in doc])
    grouped, start = [], 0
    for doc in documents:
        grouped.append(flat[start : start + len(doc)])
        start += len(doc)
    return grouped


def split_pairs(
    text: str, tokenizer: Tokenizer, valid_fraction: float, *, name: str
) -> tuple[SentencePairs, SentencePairs | None]:
    """``(train, held out)`` sentence pairs of ``text`` (held out ``None`` at fraction 0, or
    when the held-out part has no pair); ``DataError`` naming ``name`` when there are none."""
    documents = encode_documents(split_documents(text), tokenizer)
    if not documents:
        raise DataError(f"{name}: no sentences (one per line, blank lines between documents)")
    if len(documents) == 1:  # one document: hold out its last sentences
        sentences = documents[0]
        cut = len(sentences) - int(len(sentences) * valid_fraction)
        train_docs, valid_docs = [sentences[:cut]], [sentences[cut:]]
    else:
        cut = len(documents) - int(len(documents) * valid_fraction)
        train_docs, valid_docs = documents[:cut], documents[cut:]
    valid = None
    if valid_fraction > 0 and any(len(doc) > 1 for doc in valid_docs):
        valid = SentencePairs(valid_docs, name=f"{name} (held out)")
    return SentencePairs(train_docs, name=name), valid
