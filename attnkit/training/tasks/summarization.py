"""``task: summarization``: texts and their summaries, with ROUGE during validation.

Summarization needs no machinery of its own; it is two existing tasks with
another reader and another metric, and this module is the thin layer that
says so:

* an **encoder-decoder** (``model.family: transformer`` or ``rnn``, from
  scratch or warm-started from a BERT-type checkpoint:
  ``attnkit.training.warm_start_seq2seq``) *translates* the text into its
  summary: ``TranslationTask``'s objective, batches, decoding and checkpoints.
  What differs: a text longer than ``data.max_len`` tokens is cut (its
  beginning kept) instead of dropped, since most of a summary's content is at
  the start of a document; the pairs are read and encoded in memory.
* a **decoder-only** LM (``--init`` a pretrained one, e.g. SmolLM2-Instruct)
  is *instruction-tuned*: each pair becomes one conversation
  (``attnkit.data.summaries.instruction_record``: an instruction with the text
  cut to what ``data.block_size`` leaves beside the template and ``ANSWER_ROOM``
  tokens for the summary: ``text_budget``; the summary is the answer)
  and ``InstructionTask`` trains it (answer-only loss, full or LoRA).

Data: ``{data.dir}/{data.train}`` and ``{data.valid}``, JSONL
``{"text": ..., "summary": ...}`` (or ``{"src", "tgt"}``) or TSV
``text<TAB>summary`` (``attnkit.data.formats``). Validation adds ROUGE-1/2/L
F-measures (``attnkit.evaluation.rouge``, stemmed, 0-100) of greedy
summaries of the first ``train.valid_bleu_sentences`` validation pairs
(``rouge1``, ``rouge2``, ``rougeL``) to each task's loss and perplexity.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import torch
from torch import nn

from attnkit.data.formats import pair_inputs, read_pairs
from attnkit.data.instructions import InstructionSet, encode_instructions
from attnkit.data.prepared import train_on_pairs
from attnkit.data.summaries import instruction_record, text_budget
from attnkit.data.token_store import TokenPairs, id_dtype
from attnkit.data.tokenizers import Tokenizer
from attnkit.errors import ConfigError
from attnkit.training import distributed as dist_util
from attnkit.training.runconfig import RunConfig
from attnkit.training.tasks.base import Task, TaskInputs
from attnkit.training.tasks.instruction import InstructionTask
from attnkit.training.tasks.translation import TranslationTask
from attnkit.training.warm_start import WarmStart

Pair = tuple[str, str]


def _read(run: RunConfig, split: str) -> list[Pair] | None:
    data = run.data
    entry = getattr(data, split)
    if entry is None:
        return None
    inputs = pair_inputs(data.dir, entry, data.src_lang, data.tgt_lang)
    return read_pairs(inputs, skip_empty=data.skip_empty).pairs


def _rouge(
    model: nn.Module, tokenizer: Tokenizer, pairs: list[Pair], device: torch.device, **kw: int
) -> dict[str, float]:
    """ROUGE of greedy summaries of ``pairs``' texts against their summaries."""
    from attnkit.decoding.summaries import summarize_texts
    from attnkit.evaluation.rouge import rouge_scores
    from attnkit.inference import stepper_for

    with dist_util.gathered_parameters(model):  # FSDP: decoding needs them all
        hyps = summarize_texts(model, tokenizer, [t for t, _ in pairs], beam=1,
                               device=device, stepper=stepper_for(model), **kw)  # fmt: skip
    return rouge_scores(hyps, [s for _, s in pairs])


class SummarizationTask(TranslationTask):
    """An encoder-decoder writes the summary of a text (see the module doc)."""

    name: ClassVar[str] = "summarization"

    @classmethod
    def from_run(cls, given: TaskInputs) -> Task:
        """An encoder-decoder, or instruction tuning for a decoder-only ``--init`` model."""
        return summarization_task(given.run, given.tokenizer, given.start)

    def __init__(
        self, run: RunConfig, tokenizer: Tokenizer | None = None, *, start: WarmStart | None = None
    ) -> None:
        train = _read(run, "train")
        if not train:
            raise ConfigError(f"data.train: {run.data.train} holds no (text, summary) pair")
        tokenizer = tokenizer or train_on_pairs([train], run.tokenizer)[0]
        # Cut texts, not drop them: the text and its EOS fit in data.max_len positions.
        limit = run.data.max_len - 1
        src = [ids[:limit] for ids in tokenizer.encode_batch([t for t, _ in train])]
        tgt = tokenizer.encode_batch([s for _, s in train])
        pairs = TokenPairs.from_lists(src, tgt, id_dtype(tokenizer.vocab_size))
        super().__init__(run, tokenizer, pairs, _read(run, "valid"), start=start)

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> dict[str, float]:
        """Translation's loss and perplexity over all validation pairs (texts cut to
        ``data.max_len``), ROUGE on the first ``train.valid_bleu_sentences``."""
        n = min(self.cfg.valid_bleu_sentences, len(self.valid_pairs))
        saved = self.cfg.valid_bleu_sentences
        self.cfg.valid_bleu_sentences = 0  # no BLEU: ROUGE is the figure
        try:
            metrics = super().evaluate(model)
        finally:
            self.cfg.valid_bleu_sentences = saved
        if n:
            rouge = _rouge(model, self.tokenizer, self.valid_pairs[:n], self.context.device,
                           text_tokens=self.run.data.max_len - 1)  # fmt: skip
            metrics.update(rouge)
        return metrics


class SummarizationLMTask(InstructionTask):
    """A pretrained decoder-only LM is instruction-tuned to summarize (see the module doc)."""

    name: ClassVar[str] = "summarization"

    def __init__(self, run: RunConfig, tokenizer: Tokenizer, *, start: WarmStart | None = None):
        super().__init__(run, tokenizer, start=start)
        self.valid_pairs = _read(run, "valid") or []

    def _text_tokens(self) -> int:
        return text_budget(self.tokenizer, self.block)

    def read_split(self, split: str) -> InstructionSet | None:
        pairs = _read(self.run, split)
        if pairs is None:
            return None
        entry = getattr(self.run.data, split)
        path = Path(self.run.data.dir) / (entry if isinstance(entry, str) else entry[0])
        tok, limit = self.tokenizer, self._text_tokens()
        records = (
            (f"{path}: pair {i}", instruction_record(tok, text, summary, text_tokens=limit))
            for i, (text, summary) in enumerate(pairs, start=1)
        )
        return encode_instructions(records, tok, max_len=self.block, path=path)

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> dict[str, float]:
        metrics = super().evaluate(model)
        n = min(self.cfg.valid_bleu_sentences, len(self.valid_pairs))
        if n:
            pairs, device = self.valid_pairs[:n], self.context.device
            metrics.update(
                _rouge(model, self.tokenizer, pairs, device, text_tokens=self._text_tokens())
            )
        return metrics


def summarization_task(
    run: RunConfig, tokenizer: Tokenizer | None, start: WarmStart | None = None
) -> SummarizationTask | SummarizationLMTask:
    """The task for the run's model: instruction tuning for a decoder-only one (it must
    come from ``--init`` or a resumed run, with its tokenizer), else an encoder-decoder."""
    family = start.config.family if start is not None else run.model.get("family")
    if family == "decoder_only":
        if tokenizer is None:
            raise ConfigError(
                "task: summarization with a decoder-only model fine-tunes a pretrained one; "
                "start from it with --init CKPT (e.g. an imported SmolLM2-Instruct)"
            )
        return SummarizationLMTask(run, tokenizer, start=start)
    return SummarizationTask(run, tokenizer, start=start)
