"""Labelled texts for text classification: reading, label maps, encoding, batches.

Files (``read_labelled``), one example per line, blank lines skipped:

* TSV: ``label<TAB>text`` or ``label<TAB>text_a<TAB>text_b`` (a sentence
  pair), no quoting. A first line whose fields are column names (``label``
  and ``text``/``sentence``/``text_a``/``text_b``/``sentence1``/``sentence2``,
  in any order) is a header and says where each column is, so GLUE's
  ``sentence<TAB>label`` (SST-2) and ``label<TAB>sentence`` both read.
* JSONL (``.jsonl``/``.json``): one object per line with ``label`` and
  ``text`` (or ``sentence``), or ``text_a``/``text_b`` (``sentence1``/``sentence2``).

Labels are strings or integers, kept as strings (``1`` and ``"1"`` are the
same label). ``label_names`` orders them once (numerically when every label
is an integer, else as strings); the order is the classifier's output order
and is saved in its checkpoint (``EncoderOnlyConfig.label_names``). Every
malformed record is a ``DataError`` naming the file and line.

Encoding (``encode_example``) follows BERT: ``[CLS] a [SEP]`` or ``[CLS] a
[SEP] b [SEP]`` (the tokenizer's BOS and EOS ids), token types 0 for the
first part and 1 for the second, cut to ``max_len`` tokens by trimming the
longer sentence first (Hugging Face's ``longest_first``).

Shapes: ``B`` examples, ``S`` longest example in the batch.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from attnkit.data.readers import read_lines
from attnkit.errors import DataError

# Column names a TSV header may use; the first group is the first sentence.
FIRST_COLUMNS = ("text", "sentence", "text_a", "sentence1", "content")
SECOND_COLUMNS = ("text_b", "sentence2")
JSON_SUFFIXES = (".jsonl", ".json")


@dataclass
class LabelledTexts:
    """The examples of one file.

    Attributes:
        texts: the (first) sentence of each example.
        pairs: the second sentence of each example, or ``None`` (single sentences).
        labels: each example's label, as a string.
        lines: each example's line number in ``source`` (for error messages).
        source: the file's path.
    """

    texts: list[str]
    pairs: list[str] | None
    labels: list[str]
    lines: list[int]
    source: str

    def __len__(self) -> int:
        return len(self.texts)

    def label_ids(self, names: Sequence[str]) -> list[int]:
        """Labels as ids into ``names``; a label not there is a ``DataError`` naming its line."""
        index = {name: i for i, name in enumerate(names)}
        ids = []
        for label, line in zip(self.labels, self.lines):
            if label not in index:
                raise DataError(
                    f"{self.source}:{line}: label {label!r} is not one of the model's labels "
                    f"({', '.join(names)})"
                )
            ids.append(index[label])
        return ids


def label_names(labels: Sequence[str]) -> tuple[str, ...]:
    """The distinct labels in output order: numeric when all are integers, else sorted."""
    distinct = set(labels)
    if all(_is_int(x) for x in distinct):
        return tuple(sorted(distinct, key=int))
    return tuple(sorted(distinct))


def _is_int(text: str) -> bool:
    return text.lstrip("-").isdigit()


# Control characters (TAB, LF, CR, ...) and the line and paragraph separators.
_UNPRINTABLE = frozenset({"Cc", "Zl", "Zp"})


def _label(value: object, where: str) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise DataError(f"{where}: label must be a string or an integer, got {value!r}")
    label = str(value).strip()
    if not label:
        raise DataError(f"{where}: empty label")
    # `classify` prints one `label<TAB>probability` line per input: a label holding a
    # TAB, a line break (any str.splitlines splits on) or another control character
    # would break that line in two or shift its columns.
    bad = next((c for c in label if unicodedata.category(c) in _UNPRINTABLE), None)
    if bad is not None:
        raise DataError(
            f"{where}: label {label!r} holds the control character {bad!r} "
            f"(U+{ord(bad):04X}); labels are printed one per line: rename it"
        )
    return label


def _header(fields: list[str]) -> tuple[int, int, int | None] | None:
    """``(label column, first text column, second text column)`` if ``fields`` is a header."""
    names = [f.strip().lower() for f in fields]
    if "label" not in names:
        return None
    first = next((names.index(n) for n in FIRST_COLUMNS if n in names), None)
    second = next((names.index(n) for n in SECOND_COLUMNS if n in names), None)
    if first is None or len(names) != 2 + (second is not None):
        return None
    return names.index("label"), first, second


def _read_tsv(path: Path) -> LabelledTexts:
    lines = read_lines(path)
    numbered = [(i, line) for i, line in enumerate(lines, 1) if line.strip()]
    if not numbered:
        raise DataError(f"{path}: no examples (only blank lines)")
    columns = _header(numbered[0][1].split("\t"))
    if columns is not None:
        numbered = numbered[1:]
        if not numbered:
            raise DataError(f"{path}: only a header line, no examples")
        expected = f"the header's {2 + (columns[2] is not None)} tab-separated columns"
    else:
        n = len(numbered[0][1].split("\t"))
        if n not in (2, 3):
            raise DataError(
                f"{path}:{numbered[0][0]}: expected label<TAB>text or label<TAB>text_a<TAB>text_b "
                f"(or a header naming the columns), got {n} field(s)"
            )
        columns = (0, 1, 2 if n == 3 else None)
        expected = "label<TAB>text" if n == 2 else "label<TAB>text_a<TAB>text_b"
    label_col, first, second = columns
    width = 2 + (second is not None)
    texts, pairs, labels, kept = [], [], [], []
    for number, line in numbered:
        fields = line.split("\t")
        where = f"{path}:{number}"
        if len(fields) != width:
            raise DataError(f"{where}: expected {expected}, got {len(fields)} field(s)")
        labels.append(_label(fields[label_col], where))
        texts.append(_text(fields[first], where))
        if second is not None:
            pairs.append(_text(fields[second], where))
        kept.append(number)
    return LabelledTexts(texts, pairs if second is not None else None, labels, kept, str(path))


def _text(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise DataError(f"{where}: text must be a string, got {value!r}")
    if not value.strip():
        raise DataError(f"{where}: empty text")
    return value


def _read_jsonl(path: Path) -> LabelledTexts:
    texts, pairs, labels, kept = [], [], [], []
    pair_data: bool | None = None
    for number, line in enumerate(read_lines(path), 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"{where}: not valid JSON ({e.msg})") from None
        if not isinstance(record, dict) or "label" not in record:
            raise DataError(f"{where}: expected an object with 'label' and 'text' (or 'text_a', "
                            "'text_b')")  # fmt: skip
        first = next((k for k in FIRST_COLUMNS if k in record), None)
        second = next((k for k in SECOND_COLUMNS if k in record), None)
        if first is None:
            raise DataError(f"{where}: no text: expected a 'text' (or 'text_a') field")
        if pair_data is None:
            pair_data = second is not None
        elif pair_data != (second is not None):
            raise DataError(f"{where}: mixes single sentences and sentence pairs ('text_b')")
        labels.append(_label(record["label"], where))
        texts.append(_text(record[first], where))
        if second is not None:
            pairs.append(_text(record[second], where))
        kept.append(number)
    if not texts:
        raise DataError(f"{path}: no examples (only blank lines)")
    return LabelledTexts(texts, pairs if pair_data else None, labels, kept, str(path))


def read_labelled(path: str | Path) -> LabelledTexts:
    """The examples of a TSV or JSONL file (see the module doc); ``DataError`` naming the line."""
    p = Path(path)
    return _read_jsonl(p) if p.suffix.lower() in JSON_SUFFIXES else _read_tsv(p)


def split_input_line(line: str, where: str) -> tuple[str, str | None]:
    """An unlabelled input line: ``text`` or ``text_a<TAB>text_b`` (``attnkit classify``)."""
    fields = line.split("\t")
    if len(fields) > 2:
        raise DataError(f"{where}: expected text or text_a<TAB>text_b, got {len(fields)} fields")
    return fields[0], fields[1] if len(fields) == 2 else None


# -- encoding and batches ----------------------------------------------------------------


def encode_example(
    first: Sequence[int], second: Sequence[int] | None, *, bos_id: int, eos_id: int, max_len: int
) -> tuple[list[int], list[int], bool]:
    """``[CLS] a [SEP] (b [SEP])`` ids, their token types, and whether they were cut.

    ``first``/``second`` are token ids without specials; the result has at most
    ``max_len`` ids (the longer sentence loses tokens first).
    """
    a, b = list(first), list(second) if second is not None else None
    room = max_len - 2 - (b is not None)
    if room < 2:
        raise DataError(f"data.max_len: {max_len} tokens leave no room for the text")
    cut = len(a) + (len(b) if b is not None else 0) > room
    while len(a) + (len(b) if b is not None else 0) > room:
        if b is not None and len(b) > len(a):
            b.pop()
        else:
            a.pop()
    ids = [bos_id, *a, eos_id]
    types = [0] * len(ids)
    if b is not None:
        ids += [*b, eos_id]
        types += [1] * (len(b) + 1)
    return ids, types, cut


@dataclass
class ClassificationBatch:
    """Padded examples.

    Attributes:
        ids: ``(B, S)`` token ids, right-padded with the pad id.
        token_types: ``(B, S)`` segment ids (0 on padding), or ``None``.
        labels: ``(B,)`` label ids, or ``None`` (unlabelled).
    """

    ids: Tensor
    token_types: Tensor | None
    labels: Tensor | None

    def to(self, device: torch.device) -> ClassificationBatch:
        def move(t: Tensor | None) -> Tensor | None:
            return None if t is None else t.to(device, non_blocking=True)

        return ClassificationBatch(move(self.ids), move(self.token_types), move(self.labels))  # type: ignore[arg-type]


def collate_examples(
    ids: Sequence[Sequence[int]],
    types: Sequence[Sequence[int]] | None,
    labels: Sequence[int] | None,
    pad_id: int,
) -> ClassificationBatch:
    """Right-pad ``ids`` (and ``types``) to the longest example."""
    width = max(len(x) for x in ids)
    out = torch.full((len(ids), width), pad_id, dtype=torch.long)
    type_out = torch.zeros((len(ids), width), dtype=torch.long) if types is not None else None
    for row, seq in enumerate(ids):
        out[row, : len(seq)] = torch.as_tensor(seq, dtype=torch.long)
        if type_out is not None and types is not None:
            type_out[row, : len(seq)] = torch.as_tensor(types[row], dtype=torch.long)
    label_out = torch.as_tensor(labels, dtype=torch.long) if labels is not None else None
    return ClassificationBatch(out, type_out, label_out)


def length_grouped_order(
    lengths: Sequence[int], batch_size: int, generator: torch.Generator, *, group: bool = True
) -> list[list[int]]:
    """One epoch's batches of ``batch_size`` example indices, in a random order.

    ``group``: examples of similar length share a batch, so little padding is
    computed (Hugging Face's ``group_by_length``): the shuffled examples are
    cut into windows of 50 batches, each window sorted by length and cut into
    batches, and the batches shuffled. Otherwise the batches are consecutive
    slices of one shuffled order. The last batch may be smaller.
    """
    order = torch.randperm(len(lengths), generator=generator).tolist()
    if group:
        window = batch_size * 50
        order = [
            i
            for start in range(0, len(order), window)
            for i in sorted(order[start : start + window], key=lambda j: -lengths[j])
        ]
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    if group:
        shuffled = torch.randperm(len(batches), generator=generator).tolist()
        batches = [batches[i] for i in shuffled]
    return batches


def sorted_batches(lengths: Sequence[int], batch_size: int) -> Iterator[list[int]]:
    """Batches of indices sorted by length (evaluation: the least padding, any order will do)."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    for start in range(0, len(order), batch_size):
        yield order[start : start + batch_size]
