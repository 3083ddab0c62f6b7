"""Summarization data: labelled ``{"text", "summary"}`` files, documents to summarize, prompts.

* Labelled files (training, ``attnkit evaluate --labelled``): JSONL, one
  ``{"text": ..., "summary": ...}`` per line (other keys, such as AESLC's
  ``id`` and ``annotations``, are ignored), or TSV, ``text<TAB>summary``.
  These are read by the pair readers of ``attnkit.data.formats`` (the
  text is the source side, the summary the target), so every problem is the
  same one-line ``DataError`` naming file and line.
* Documents to summarize (``attnkit summarize``): one per line, or, for a
  ``.jsonl`` file, one ``{"text": ...}`` per line.
* The instruction format a decoder-only model is trained and asked in: one
  user turn, ``PROMPT`` with the (cut) text, in the tokenizer's chat template
  when it has one; the summary is the assistant's answer. Training
  (``task: summarization`` on a decoder-only model) and ``attnkit
  summarize`` both build it here, so they agree.
"""

from __future__ import annotations

from pathlib import Path

from attnkit.data.chat import chat_template_of
from attnkit.data.formats import Input, Kind, json_texts, read_pairs
from attnkit.data.readers import check_readable, read_input_lines
from attnkit.data.tokenizers import Tokenizer
from attnkit.errors import DataError

PROMPT = "Write a short summary (a subject line) of this text.\n\n{text}"
# Tokens of a decoder-only training sequence kept for the summary (and its end of turn)
# beside the template's own: the text is cut to what is left, so the answer is never cut.
ANSWER_ROOM = 32


def _kind(path: Path) -> Kind | None:
    name = path.name.removesuffix(".gz")
    return "jsonl" if name.endswith(".jsonl") else "tsv" if name.endswith(".tsv") else None


def read_labelled_summaries(path: str | Path, *, skip_empty: bool = False) -> list[tuple[str, str]]:
    """``(text, summary)`` pairs of a JSONL (``{"text", "summary"}``) or TSV file."""
    p = Path(path)
    kind = _kind(p)
    if kind is None:
        raise DataError(
            f'{p}: expected a .jsonl file ({{"text": ..., "summary": ...}} per line) or a '
            ".tsv file (text<TAB>summary per line)"
        )
    check_readable(p)
    return read_pairs([Input(kind, (p,))], skip_empty=skip_empty).pairs


def read_documents(path: str | Path | None) -> list[str]:
    """The documents to summarize: the ``"text"`` of each record of a ``.jsonl`` file, else
    one per line of the file (or of standard input when ``path`` is ``None``)."""
    if path is not None and _kind(Path(path)) == "jsonl":
        check_readable(Path(path))
        return [text for block in json_texts(Path(path)) for text in block]
    return read_input_lines(path)


def cut_text(tokenizer: Tokenizer, text: str, limit: int) -> str:
    """``text`` cut to its first ``limit`` tokens (the whole of it when it fits)."""
    ids = tokenizer.encode(text)
    return text if len(ids) <= limit else tokenizer.decode(ids[:limit])


def text_budget(tokenizer: Tokenizer, block: int) -> int:
    """How many tokens of the text fit a decoder-only sequence of ``block`` tokens: what the
    prompt's template and instruction and ``ANSWER_ROOM`` leave (at least 1)."""
    overhead = len(tokenizer.encode(prompt_text(tokenizer, "", text_tokens=1)))
    return max(block - overhead - ANSWER_ROOM, 1)


def instruction_record(
    tokenizer: Tokenizer, text: str, summary: str, *, text_tokens: int
) -> dict[str, object]:
    """One training record in ``attnkit.data.instructions``' formats: a conversation when
    the tokenizer has a chat template, else prompt/completion."""
    prompt = PROMPT.format(text=cut_text(tokenizer, text, text_tokens))
    if getattr(tokenizer, "chat_template", None):
        return {"messages": [{"role": "user", "content": prompt},
                             {"role": "assistant", "content": summary}]}  # fmt: skip
    return {"prompt": prompt + "\n\nSummary: ", "completion": summary}


def prompt_text(tokenizer: Tokenizer, text: str, *, text_tokens: int) -> str:
    """What a decoder-only model is given to summarize ``text`` (``instruction_record``'s
    context, ending where the answer starts)."""
    prompt = PROMPT.format(text=cut_text(tokenizer, text, text_tokens))
    if getattr(tokenizer, "chat_template", None):
        template = chat_template_of(tokenizer)
        return template.render([{"role": "user", "content": prompt}], add_generation_prompt=True)
    return prompt + "\n\nSummary: "
