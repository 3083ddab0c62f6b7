"""Question + context windows for extractive question answering, as BERT reads them.

Each window is ``[CLS] question [SEP] context piece [SEP]`` (the tokenizer's
BOS and EOS ids), token types 0 up to the first ``[SEP]`` and 1 after. The
question is cut to ``MAX_QUERY_TOKENS`` (64, BERT's ``max_query_length``; half
the window for windows under 131 tokens). A context longer than what is left
of ``max_len`` (its ``room``) is read in several windows, each starting
``room - stride`` tokens after the last, so that consecutive windows share
``stride`` context tokens (transformers' ``run_qa.py`` ``--doc_stride``): an
answer cut by one window's edge is whole in the next.

Every context token keeps its character span in the context (the
tokenizer's offsets, ``Tokenizer.encode_offsets``), so a predicted span of
tokens maps back to the exact characters. A context is tokenized once
however many questions it has (SQuAD has ~5 per paragraph).

Targets (training): the window positions of the answer's first and last
token; an answer not wholly inside the window (or no answer) points both at
``[CLS]``, position 0 (``run_qa.py``'s convention).

Shapes: ``B`` windows, ``S`` longest window in the batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from attnkit.data.squad import QAExample
from attnkit.data.tokenizers import Tokenizer
from attnkit.errors import ConfigError

MAX_QUERY_TOKENS = 64
# What answer, evaluate and the server read by default: configs/squad_minilm.yaml's windows
# (transformers' pipeline reads 384; 256 costs about half, and most paragraphs fit).
WINDOW, STRIDE = 256, 128
CHUNK = 1024  # contexts tokenized at a time


@dataclass
class Windows:
    """The windows of some examples.

    Attributes:
        example: ``(W,)`` the example each window reads.
        questions: each example's question ids (cut to ``MAX_QUERY_TOKENS``).
        contexts: each distinct context's ids; ``context_of[e]`` indexes it.
        offsets: each distinct context's ``(T, 2)`` character spans of its tokens.
        span: ``(W, 2)`` the context tokens ``[a, b)`` each window holds.
        targets: ``(W, 2)`` start and end positions in the window (0: ``[CLS]``).
        lengths: ``(W,)`` tokens in each window.
        cut_questions: how many questions were cut.
    """

    example: np.ndarray
    questions: list[np.ndarray]
    contexts: list[np.ndarray]
    context_of: np.ndarray
    offsets: list[np.ndarray]
    span: np.ndarray
    targets: np.ndarray
    lengths: np.ndarray
    cut_questions: int

    def __len__(self) -> int:
        return len(self.example)

    def context_start(self, w: int) -> int:
        """The window position of window ``w``'s first context token."""
        return len(self.questions[self.example[w]]) + 2


def query_limit(max_len: int) -> int:
    """The most question tokens a window of ``max_len`` holds."""
    return min(MAX_QUERY_TOKENS, (max_len - 3) // 2)


def default_windows(model_max_len: int) -> tuple[int, int]:
    """``(window, stride)`` for a model of ``model_max_len`` positions: ``WINDOW`` (or the
    model's positions), sharing ``STRIDE`` tokens (or half of a short window's room)."""
    window = min(WINDOW, model_max_len)
    return window, default_stride(window)


def default_stride(max_len: int) -> int:
    """``STRIDE``, or half a window's room for short windows."""
    return min(STRIDE, (max_len - 3 - query_limit(max_len)) // 2)


def check_stride(max_len: int, stride: int) -> None:
    """Refuse a stride that leaves a window no new context tokens (errors name the keys)."""
    room = max_len - 3 - query_limit(max_len)
    if room < 1:
        raise ConfigError(f"data.max_len: {max_len} tokens leave no room for a question and "
                          "a context")  # fmt: skip
    if not 0 <= stride < room:
        raise ConfigError(f"data.doc_stride: {stride}; must be in [0, {room}) for data.max_len "
                          f"{max_len} (windows must move on)")  # fmt: skip


def answer_tokens(offsets: np.ndarray, start: int, end: int) -> tuple[int, int] | None:
    """The first and last token overlapping the characters ``[start, end)``, or ``None``."""
    inside = np.nonzero((offsets[:, 1] > start) & (offsets[:, 0] < end))[0]
    if len(inside) == 0:
        return None
    return int(inside[0]), int(inside[-1])


def make_windows(
    tokenizer: Tokenizer, examples: Sequence[QAExample], *, max_len: int, stride: int
) -> Windows:
    """Tokenize ``examples`` and cut them into windows (module doc)."""
    check_stride(max_len, stride)
    index: dict[str, int] = {}
    context_of = np.array([index.setdefault(x.context, len(index)) for x in examples], np.int64)
    texts, contexts, offsets = list(index), [], []
    for at in range(0, len(texts), CHUNK):  # in chunks: tokenizers' objects are large
        for ids, spans in tokenizer.encode_offsets(texts[at : at + CHUNK]):
            contexts.append(np.asarray(ids, dtype=np.int32))
            offsets.append(np.asarray(spans, dtype=np.int32).reshape(-1, 2))
    questions, cut, limit = [], 0, query_limit(max_len)
    for ids in tokenizer.encode_batch([x.question for x in examples]):
        cut += len(ids) > limit
        questions.append(np.asarray(ids[:limit], dtype=np.int32))
    rows: list[tuple[int, int, int, int, int]] = []
    for e, x in enumerate(examples):
        c = int(context_of[e])
        n, room = len(contexts[c]), max_len - 3 - len(questions[e])
        answer = None
        if x.answers:  # training reads the first answer (SQuAD's train set has one)
            answer = answer_tokens(offsets[c], x.starts[0], x.starts[0] + len(x.answers[0]))
        first = len(questions[e]) + 2
        a = 0
        while True:
            b = min(a + room, n)
            start = end = 0
            if answer is not None and a <= answer[0] and answer[1] < b:
                start, end = first + answer[0] - a, first + answer[1] - a
            rows.append((e, a, b, start, end))
            if b >= n:
                break
            a += room - stride
    table = np.asarray(rows, dtype=np.int64).reshape(-1, 5)
    q_len = np.array([len(q) for q in questions], dtype=np.int64)
    lengths = q_len[table[:, 0]] + table[:, 2] - table[:, 1] + 3
    return Windows(table[:, 0], questions, contexts, context_of, offsets, table[:, 1:3],
                   table[:, 3:5], lengths, cut)  # fmt: skip


@dataclass
class QABatch:
    """Padded windows.

    Attributes:
        ids: ``(B, S)`` token ids, right-padded with the pad id.
        token_types: ``(B, S)`` 0 for ``[CLS] question [SEP]``, 1 after (0 on padding).
        context: ``(B, S)`` bool, True on the context tokens (where an answer may be).
        targets: ``(B, 2)`` start and end positions.
        windows: the window index of each row.
    """

    ids: Tensor
    token_types: Tensor
    context: Tensor
    targets: Tensor
    windows: list[int]

    def to(self, device: torch.device) -> QABatch:
        return QABatch(self.ids.to(device), self.token_types.to(device),
                       self.context.to(device), self.targets.to(device), self.windows)  # fmt: skip


def collate_windows(windows: Windows, rows: Sequence[int], tokenizer: Tokenizer) -> QABatch:
    """The windows ``rows`` as one padded batch."""
    lengths = windows.lengths[list(rows)]
    width = int(lengths.max())
    ids = np.full((len(rows), width), tokenizer.pad_id, dtype=np.int64)
    types = np.zeros((len(rows), width), dtype=np.int64)
    context = np.zeros((len(rows), width), dtype=bool)
    for r, w in enumerate(rows):
        e = windows.example[w]
        q = windows.questions[e]
        a, b = windows.span[w]
        piece = windows.contexts[windows.context_of[e]][a:b]
        first = len(q) + 2
        ids[r, : first + len(piece) + 1] = np.concatenate(
            ([tokenizer.bos_id], q, [tokenizer.eos_id], piece, [tokenizer.eos_id])
        )
        types[r, first : first + len(piece) + 1] = 1
        context[r, first : first + len(piece)] = True
    return QABatch(torch.from_numpy(ids), torch.from_numpy(types), torch.from_numpy(context),
                   torch.from_numpy(windows.targets[list(rows)].copy()), list(rows))  # fmt: skip
