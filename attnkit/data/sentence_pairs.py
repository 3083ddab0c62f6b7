"""Sentence pairs for BERT's next-sentence prediction (Devlin et al., 2019, §3.1 "Task #2").

A corpus is documents of sentences: one sentence per line, documents separated
by blank lines (a file without blank lines is one document). A pair is
``[CLS] A [SEP] B [SEP]`` with segment ids 0 for ``[CLS] A [SEP]`` and 1 for
``B [SEP]`` (``attnkit.data.classification.encode_example``), cut to
``max_len`` by trimming the longer segment first, A at its start and B at its
end, so the join stays whole (``cut_around_join``). As in BERT, A and B are
segments, spans of whole consecutive sentences (joined by a newline's ids)
that together fill the pair (§3.1: "a 'sentence' can be an arbitrary span of
contiguous text"); short sentences make segments of several, long ones of
one. A starts at a sentence that has a next one in its document. Half of a
batch's pairs (exactly ``n // 2``, the odd one by a coin) are NotNext: B
starts at a random sentence of another document (label 1), or, in a
one-document corpus, anywhere but at A's next sentence; the others are
IsNext: B is what follows A in its document (label 0, as in Hugging Face's
``next_sentence_label``).

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
    ids; ``labels``, IS_NEXT (0) or NOT_NEXT (1); ``a``/``b``, the sentence index ranges
    (``range(first, end)``) that A and B are made of."""

    ids: list[list[int]]
    types: list[list[int]]
    labels: list[int]
    a: list[range]
    b: list[range]


class SentencePairs:
    """The encoded sentences of some documents, and random NSP pairs drawn from them.

    Attributes:
        sentences: every sentence's token ids (no specials), documents in order.
        document: each sentence's document index.
        firsts: the sentences that have a next one in their document (where A may start).
        separator: the ids put between two sentences of one segment (a newline's).
    """

    def __init__(
        self,
        documents: Sequence[Sequence[Sequence[int]]],
        *,
        separator: Sequence[int] = (),
        name: str = "data",
    ):
        self.sentences = [list(s) for doc in documents for s in doc]
        self.document = [d for d, doc in enumerate(documents) for _ in doc]
        self.separator = list(separator)
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
        """``n`` pairs, ``n // 2`` NotNext (plus a coin's for odd ``n``), from ``generator``.

        As BERT's ``create_pretraining_data``: from a random start, whole sentences of
        A's document are taken until they fill the pair (``max_len - 3`` tokens, at
        least two sentences); A is a random number of the first of them, and B the
        rest (IsNext) or, from a random sentence of another document on, as much of it
        as fills what A leaves (NotNext). The pair is then cut to ``max_len`` around
        the join.
        """
        budget = max_len - 3  # [CLS], [SEP], [SEP]
        draws = torch.rand(n, 3, generator=generator)
        not_next = n // 2 + int(n % 2 == 1 and bool(draws[0, 2] < 0.5))
        labels = (torch.randperm(n, generator=generator) < not_next).long().tolist()
        batch = PairBatch([], [], [], [], [])
        for (pick_a, split, pick_b), label in zip(draws.tolist(), labels):
            start = self.firsts[min(int(pick_a * len(self.firsts)), len(self.firsts) - 1)]
            chunk = self._fill(start, budget, at_least=2)
            a = range(start, start + 1 + min(int(split * (len(chunk) - 1)), len(chunk) - 2))
            if label == IS_NEXT:
                b = range(a.stop, chunk.stop)
            else:
                b = self._fill(self._random_other(a.stop - 1, pick_b), budget - self._length(a))
            first, second = cut_around_join(self._ids(a), self._ids(b), budget)
            ids, types, _ = encode_example(
                first, second, bos_id=bos_id, eos_id=eos_id, max_len=max_len
            )
            batch.ids.append(ids)
            batch.types.append(types)
            batch.labels.append(label)
            batch.a.append(a)
            batch.b.append(b)
        return batch

    def _length(self, sentences: range) -> int:
        return sum(len(self.sentences[i]) for i in sentences) + len(self.separator) * (
            len(sentences) - 1
        )

    def _fill(self, start: int, budget: int, *, at_least: int = 1) -> range:
        """Sentences of ``start``'s document from ``start`` on, until they reach ``budget``
        tokens (the one that crosses it included; at least ``at_least`` if the document has
        them)."""
        end = self.doc_start[self.document[start] + 1]
        stop, length = start, -len(self.separator)
        while stop < end and (length < budget or stop - start < at_least):
            length += len(self.sentences[stop]) + len(self.separator)
            stop += 1
        return range(start, stop)

    def _ids(self, sentences: range) -> list[int]:
        ids: list[int] = []
        for i in sentences:
            ids += (self.separator if ids else []) + self.sentences[i]
        return ids

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


def cut_around_join(a: list[int], b: list[int], room: int) -> tuple[list[int], list[int]]:
    """``a`` and ``b`` cut to ``room`` tokens together, the longer first, keeping what is
    next to the join: ``a`` loses its first tokens, ``b`` its last (where A ends and B
    begins is what tells a next sentence from a random one)."""
    keep_a, keep_b = len(a), len(b)
    while keep_a + keep_b > max(room, 0):
        if keep_a > keep_b:
            keep_a -= 1
        else:
            keep_b -= 1
    return a[len(a) - keep_a :], b[:keep_b]


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


def newline_ids(tokenizer: Tokenizer) -> list[int]:
    """What joins two sentences of a segment: the tokenizer's ids of a newline (as in the
    text), or none when it has no token for it (a newline it maps to unknown)."""
    ids = tokenizer.encode("\n")
    return [] if tokenizer.unk_id is not None and tokenizer.unk_id in ids else ids


def split_pairs(
    text: str, tokenizer: Tokenizer, valid_fraction: float, *, name: str
) -> tuple[SentencePairs, SentencePairs | None]:
    """``(train, held out)`` sentence pairs of ``text`` (held out ``None`` at fraction 0, or
    when the held-out part has no pair); ``DataError`` naming ``name`` when there are none."""
    documents = encode_documents(split_documents(text), tokenizer)
    separator = newline_ids(tokenizer)
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
        valid = SentencePairs(valid_docs, separator=separator, name=f"{name} (held out)")
    return SentencePairs(train_docs, separator=separator, name=name), valid
