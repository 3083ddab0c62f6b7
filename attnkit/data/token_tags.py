"""Tagged sentences for token classification (named entities): reading, writing, encoding.

Files (``read_tagged``), read through ``attnkit.data.readers`` (bounded):

* CoNLL (any name but ``.jsonl``/``.json``): one word per line, whitespace-separated
  columns, the first the word and the last its tag (CoNLL-2003's ``EU NNP I-NP
  I-ORG``, or just ``EU B-ORG``); a blank line ends a sentence; ``-DOCSTART-``
  lines (document breaks) are skipped.
* JSONL: one sentence per line, ``{"tokens": [...], "tags": [...]}`` (or ``words``
  / ``ner_tags`` as Hugging Face datasets name them; tags as strings).

Tags are IOB1, IOB2/BIO or BIOES (``attnkit.data.tag_schemes``): the scheme is
given (``data.tag_scheme``) or detected, and the tags are kept as BIO. Every
malformed line is a ``DataError`` naming the file and line.

Encoding (``encode_words``) follows BERT's token classification: each word is
split into sub-tokens by the model's tokenizer on its own (what Hugging Face's
``is_split_into_words`` does for WordPiece), the sentence is ``[CLS] ... [SEP]``
cut to ``max_len`` (whole words; the cut sentences are counted), and a word's
label sits on its first sub-token; the other positions are ``IGNORE`` (-100),
left out of the loss and of predictions.

Shapes: ``B`` sentences, ``S`` longest encoded sentence in the batch.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from attnkit import jsonio
from attnkit.data.readers import read_lines
from attnkit.data.tag_schemes import (
    PREFIXES,
    canonical,
    detect_scheme,
    from_bio,
    split_tag,
    to_bio,
)
from attnkit.data.tokenizers import Tokenizer
from attnkit.errors import DataError

IGNORE = -100  # the label of positions the loss skips (torch's cross_entropy ignore_index)
JSON_SUFFIXES = (".jsonl", ".json")
DOCSTART = "-DOCSTART-"


@dataclass
class TaggedSentences:
    """The sentences of one file, tags as BIO.

    Attributes:
        words: each sentence's words.
        tags: each sentence's BIO tags, one per word.
        lines: the line number where each sentence starts (for error messages).
        source: the file's path.
        scheme: the file's tag scheme (``iob1``, ``bio`` or ``bioes``).
    """

    words: list[list[str]]
    tags: list[list[str]]
    lines: list[int]
    source: str
    scheme: str

    def __len__(self) -> int:
        return len(self.words)

    def tag_ids(self, names: Sequence[str]) -> list[list[int]]:
        """Tags as ids into ``names``; one not there is a ``DataError`` naming its sentence."""
        index = {name: i for i, name in enumerate(names)}
        out = []
        for tags, line in zip(self.tags, self.lines):
            for tag in tags:
                if tag not in index:
                    raise DataError(f"{self.source}:{line}: tag {tag!r} is not one of the "
                                    f"model's labels ({', '.join(names)})")  # fmt: skip
            out.append([index[t] for t in tags])
        return out


def _read_conll(path: Path) -> tuple[list[list[str]], list[list[str]], list[list[int]]]:
    words: list[list[str]] = []
    tags: list[list[str]] = []
    numbers: list[list[int]] = []
    current: tuple[list[str], list[str], list[int]] = ([], [], [])
    for number, line in enumerate([*read_lines(path), ""], 1):
        fields = line.split()
        if fields and fields[0] == DOCSTART:
            fields = []  # a document break ends the sentence, as a blank line does
        if not fields:
            if current[0]:
                words.append(current[0])
                tags.append(current[1])
                numbers.append(current[2])
                current = ([], [], [])
            continue
        if len(fields) < 2:
            raise DataError(f"{path}:{number}: expected a word and its tag (whitespace-separated "
                            f"columns, the tag last), got one field {fields[0]!r}")  # fmt: skip
        current[0].append(fields[0])
        current[1].append(fields[-1])
        current[2].append(number)
    return words, tags, numbers


def _strings(value: object, key: str, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(x, str) and x for x in value):
        raise DataError(f"{where}: '{key}' must be a list of non-empty strings")
    return list(value)


def _read_jsonl(path: Path) -> tuple[list[list[str]], list[list[str]], list[list[int]]]:
    words, tags, numbers = [], [], []
    for number, line in enumerate(read_lines(path), 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"{where}: not valid JSON ({e.msg})") from None
        if not isinstance(record, dict):
            raise DataError(f"{where}: expected an object with 'tokens' and 'tags'")
        word_key = next((k for k in ("tokens", "words") if k in record), None)
        tag_key = next((k for k in ("tags", "ner_tags") if k in record), None)
        if word_key is None or tag_key is None:
            raise DataError(f"{where}: expected an object with 'tokens' and 'tags'")
        w = _strings(record[word_key], word_key, where)
        t = _strings(record[tag_key], tag_key, where)
        if len(w) != len(t):
            raise DataError(f"{where}: {len(w)} tokens but {len(t)} tags")
        if not w:
            raise DataError(f"{where}: an empty sentence (no tokens)")
        words.append(w)
        tags.append(t)
        numbers.append([number] * len(w))
    return words, tags, numbers


def read_tagged(path: str | Path, scheme: str = "auto") -> TaggedSentences:
    """The sentences of a CoNLL or JSONL file (module doc), tags converted to BIO.

    ``scheme``: ``auto`` (detected, ``tag_schemes.detect_scheme``), ``iob1``,
    ``iob2``/``bio`` or ``bioes``. ``DataError`` naming the file and line.
    """
    p = Path(path)
    jsonl = p.suffix.lower() in JSON_SUFFIXES
    words, raw, numbers = _read_jsonl(p) if jsonl else _read_conll(p)
    if not words:
        raise DataError(f"{p}: no tagged sentences")
    for tags, lines in zip(raw, numbers):
        for tag, line in zip(tags, lines):
            try:
                split_tag(tag)
            except ValueError as e:
                raise DataError(f"{p}:{line}: {e}") from None
    name = detect_scheme(raw) if scheme == "auto" else canonical(scheme)
    allowed = "O" + PREFIXES[name]
    for tags, lines in zip(raw, numbers):
        for tag, line in zip(tags, lines):
            if split_tag(tag)[0] not in allowed:
                raise DataError(f"{p}:{line}: tag {tag!r} is not a {name.upper()} tag "
                                f"(data.tag_scheme: {scheme})")  # fmt: skip
    bio = [to_bio(tags, name) for tags in raw]
    return TaggedSentences(words, bio, [n[0] for n in numbers], str(p), name)


def conll_text(words: Sequence[Sequence[str]], tags: Sequence[Sequence[str]], scheme: str) -> str:
    """Sentences as CoNLL ``word tag`` lines, a blank line after each; BIO ``tags``
    written in ``scheme``."""
    blocks = []
    for w, t in zip(words, tags):
        lines = [f"{word} {tag}" for word, tag in zip(w, from_bio(t, scheme))]
        blocks.append("\n".join(lines) + "\n\n")
    return "".join(blocks)


def jsonl_text(words: Sequence[Sequence[str]], tags: Sequence[Sequence[str]], scheme: str) -> str:
    """Sentences as JSONL ``{"tokens": [...], "tags": [...]}`` lines, tags in ``scheme``."""
    return "".join(
        jsonio.dumps({"tokens": list(w), "tags": from_bio(t, scheme)}, ensure_ascii=False) + "\n"
        for w, t in zip(words, tags)
    )


# -- encoding and batches ----------------------------------------------------------------


@dataclass
class EncodedWords:
    """Sentences as ``[CLS] sub-tokens [SEP]`` ids.

    Attributes:
        ids: each sentence's token ids.
        first: each sentence's position of every kept word's first sub-token
            (``len(first[i])`` words of sentence ``i`` fit; the rest were cut).
        truncated: how many sentences were cut to ``max_len``.
    """

    ids: list[list[int]]
    first: list[list[int]]
    truncated: int

    @property
    def lengths(self) -> list[int]:
        return [len(x) for x in self.ids]


def encode_words(
    tokenizer: Tokenizer, sentences: Sequence[Sequence[str]], max_len: int
) -> EncodedWords:
    """Every sentence's ids and word starts (module doc). A word that encodes to nothing
    (a stray control character) becomes the unknown token, so every word keeps a place."""
    if max_len < 3:
        raise DataError(f"data.max_len: {max_len} tokens leave no room for a word")
    vocabulary = sorted({w for sentence in sentences for w in sentence})
    pieces = dict(zip(vocabulary, tokenizer.encode_batch(vocabulary)))
    unknown = [] if tokenizer.unk_id is None else [tokenizer.unk_id]
    ids, first, truncated = [], [], 0
    for sentence in sentences:
        seq, starts = [tokenizer.bos_id], []
        for word in sentence:
            sub = pieces[word] or unknown
            if len(seq) + len(sub) > max_len - 1:
                truncated += 1
                break
            starts.append(len(seq) if sub else -1)
            seq += sub
        ids.append([*seq, tokenizer.eos_id])
        first.append(starts)
    return EncodedWords(ids, first, truncated)


def word_labels(encoded: EncodedWords, tag_ids: Sequence[Sequence[int]]) -> list[list[int]]:
    """Per-position labels: a word's tag id on its first sub-token, ``IGNORE`` elsewhere."""
    out = []
    for ids, starts, tags in zip(encoded.ids, encoded.first, tag_ids):
        labels = [IGNORE] * len(ids)
        for position, tag in zip(starts, tags):
            if position >= 0:
                labels[position] = tag
        out.append(labels)
    return out


@dataclass
class TokenBatch:
    """Padded sentences.

    Attributes:
        ids: ``(B, S)`` token ids, right-padded with the pad id.
        labels: ``(B, S)`` tag ids on first sub-tokens, ``IGNORE`` elsewhere, or ``None``.
    """

    ids: Tensor
    labels: Tensor | None

    def to(self, device: torch.device) -> TokenBatch:
        labels = None if self.labels is None else self.labels.to(device, non_blocking=True)
        return TokenBatch(self.ids.to(device, non_blocking=True), labels)


def collate_words(
    ids: Sequence[Sequence[int]], labels: Sequence[Sequence[int]] | None, pad_id: int
) -> TokenBatch:
    """Right-pad ``ids`` (with ``pad_id``) and ``labels`` (with ``IGNORE``) to the longest."""
    width = max(len(x) for x in ids)
    out = torch.full((len(ids), width), pad_id, dtype=torch.long)
    label_out = torch.full((len(ids), width), IGNORE, dtype=torch.long) if labels else None
    for row, seq in enumerate(ids):
        out[row, : len(seq)] = torch.as_tensor(seq, dtype=torch.long)
        if label_out is not None and labels is not None:
            label_out[row, : len(seq)] = torch.as_tensor(labels[row], dtype=torch.long)
    return TokenBatch(out, label_out)
