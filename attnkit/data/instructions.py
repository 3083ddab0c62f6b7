"""Instruction data for decoder LMs: JSONL conversations, tokens, and which tokens are answers.

One JSON object per line, either

* ``{"messages": [{"role": "user", "content": "..."}, {"role": "assistant", ...}, ...]}``,
  rendered with the tokenizer's chat template (``attnkit.data.chat``); every
  assistant message is an answer; or
* ``{"prompt": "...", "completion": "..."}``: the two texts as they are, then
  the end-of-sequence token; the completion (and that EOS) is the answer.

Instruction tuning learns to answer, not to write questions: the loss counts
the answer tokens only (``Sequence.scored``). A conversation is rendered turn
by turn: the text up to an assistant message with the generation prompt
(``<|im_start|>assistant\\n``) is context, what the full conversation adds
after it (the answer and its end-of-turn) is an answer. Each piece is
tokenized on its own, so a token never straddles a context/answer boundary;
the template must render each prefix of a conversation as a prefix of the
whole (ChatML, Llama and most templates do).

A sequence longer than the model's context is cut to it (counted), and one
that keeps no answer token is dropped (counted). Every malformed record is a
one-line ``DataError`` naming the file and line (``train.jsonl:7: ...``).

Shapes: ``B`` sequences, ``T`` tokens.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from collections.abc import Sequence as Seq
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

from attnkit.data.chat import ChatTemplate, chat_template_of, check_messages
from attnkit.data.readers import read_lines
from attnkit.data.tokenizers import Tokenizer
from attnkit.errors import DataError

IGNORE_INDEX = -100  # targets that are not scored (F.cross_entropy's default)


@dataclass
class Sequence:
    """One tokenized example: its ids and, per id, whether it is an answer token."""

    ids: list[int]
    scored: list[bool]

    def add(self, ids: list[int], scored: bool) -> None:
        self.ids += ids
        self.scored += [scored] * len(ids)


@dataclass
class InstructionSet:
    """Tokenized examples of one file, with what was cut or dropped to fit the context."""

    sequences: list[Sequence]
    truncated: int = 0
    dropped: int = 0
    path: Path = field(default_factory=Path)

    @property
    def answer_tokens(self) -> int:
        return sum(sum(s.scored[1:]) for s in self.sequences)


def encode_conversation(
    messages: Seq[dict[str, str]], tokenizer: Tokenizer, template: ChatTemplate
) -> Sequence:
    """Render ``messages`` turn by turn; assistant turns are answers (see the module doc)."""
    out = Sequence([], [])
    shown = ""  # the text encoded so far
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        prompt = template.render(messages[:i], add_generation_prompt=True)
        full = template.render(messages[: i + 1])
        if not prompt.startswith(shown) or not full.startswith(prompt):
            raise DataError(
                f"messages[{i}]: the chat template does not render this conversation turn "
                "by turn (a prefix of it is not a prefix of the whole); use prompt/completion"
            )
        out.add(tokenizer.encode(prompt[len(shown) :]), False)
        out.add(tokenizer.encode(full[len(prompt) :]), True)
        shown = full
    if not shown:
        raise DataError('"messages": no assistant message, so nothing to learn')
    rest = template.render(messages)[len(shown) :]
    out.add(tokenizer.encode(rest), False)
    return out


def encode_prompt_completion(prompt: str, completion: str, tokenizer: Tokenizer) -> Sequence:
    """``prompt`` (context), then ``completion`` + EOS (the answer)."""
    out = Sequence([], [])
    out.add(tokenizer.encode(prompt), False)
    out.add(tokenizer.encode(completion) + [tokenizer.eos_id], True)
    return out


def encode_record(record: object, tokenizer: Tokenizer, template: ChatTemplate | None) -> Sequence:
    """One parsed JSON line as a ``Sequence``; ``DataError`` (without the place) otherwise."""
    if not isinstance(record, dict):
        raise DataError(f"expected a JSON object, got {type(record).__name__}")
    if "messages" in record:
        if template is None:
            template = chat_template_of(tokenizer)
        return encode_conversation(check_messages(record["messages"]), tokenizer, template)
    if "prompt" in record or "completion" in record:
        for key in ("prompt", "completion"):
            if not isinstance(record.get(key), str):
                got = "missing" if key not in record else f"a {type(record[key]).__name__}"
                raise DataError(f'"{key}": expected a string, {got}')
        if not record["completion"]:
            raise DataError('"completion": empty, so nothing to learn')
        return encode_prompt_completion(record["prompt"], record["completion"], tokenizer)
    keys = ", ".join(sorted(record)) or "none"
    raise DataError(f'expected "messages" or "prompt" and "completion"; the keys are {keys}')


def read_instructions(path: str | Path, tokenizer: Tokenizer, *, max_len: int) -> InstructionSet:
    """Every record of a JSONL file, tokenized and cut to ``max_len + 1`` tokens (inputs
    and shifted targets of ``max_len`` positions). Blank lines are skipped."""
    path = Path(path)

    def records() -> Iterator[tuple[str, object]]:
        for number, line in enumerate(read_lines(path), start=1):
            if not line.strip():
                continue
            try:
                yield f"{path}:{number}", json.loads(line)
            except json.JSONDecodeError as e:
                where = f"{path}:{number}"
                raise DataError(f"{where}: not valid JSON ({e.msg}, column {e.colno})") from None

    return encode_instructions(records(), tokenizer, max_len=max_len, path=path)


def encode_instructions(
    records: Iterable[tuple[str, object]], tokenizer: Tokenizer, *, max_len: int, path: Path
) -> InstructionSet:
    """``(where, record)`` pairs (``where`` names the record in errors: ``file:line``)
    tokenized as ``read_instructions`` does; ``path`` is the file they came from."""
    template = chat_template_of(tokenizer) if getattr(tokenizer, "chat_template", None) else None
    data = InstructionSet([], path=path)
    for where, record in records:
        try:
            sequence = encode_record(record, tokenizer, template)
        except DataError as e:
            raise DataError(f"{where}: {e}") from None
        if len(sequence.ids) > max_len + 1:
            data.truncated += 1
            sequence = Sequence(sequence.ids[: max_len + 1], sequence.scored[: max_len + 1])
        if not any(sequence.scored[1:]):  # the first token is never a target
            data.dropped += 1
            continue
        data.sequences.append(sequence)
    if not data.sequences:
        raise DataError(f"{path}: no example with an answer token (empty, or all cut off)")
    return data


def collate(sequences: Seq[Sequence], pad_id: int) -> tuple[Tensor, Tensor]:
    """Inputs ``(B, T)`` and targets ``(B, T)``, right-padded to the longest; targets that
    are not answer tokens (context, padding) are ``IGNORE_INDEX``."""
    width = max(len(s.ids) for s in sequences) - 1
    inputs = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    targets = torch.full((len(sequences), width), IGNORE_INDEX, dtype=torch.long)
    for row, s in enumerate(sequences):
        ids = torch.tensor(s.ids, dtype=torch.long)
        scored = torch.tensor(s.scored[1:], dtype=torch.bool)
        n = ids.numel() - 1
        inputs[row, :n] = ids[:-1]
        targets[row, :n] = torch.where(scored, ids[1:], IGNORE_INDEX)
    return inputs, targets


def pack(sequences: Seq[Sequence], block: int) -> list[Sequence]:
    """The sequences end to end, cut into pieces of ``block + 1`` tokens that overlap by
    one (each piece's last token is the next one's first), so every answer token of the
    stream is a target exactly once. Attention is not reset between examples (the
    model takes no document mask): packing trades that for no padding."""
    ids: list[int] = []
    scored: list[bool] = []
    for s in sequences:
        ids += s.ids
        scored += s.scored
    pieces = []
    for start in range(0, max(len(ids) - 1, 1), block):
        piece = Sequence(ids[start : start + block + 1], scored[start : start + block + 1])
        if any(piece.scored[1:]):
            pieces.append(piece)
    return pieces
