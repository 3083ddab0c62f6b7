"""The extractive question answering task: an encoder-only model points at the answer.

Data: ``{data.dir}/{data.train}`` and ``{data.dir}/{data.valid}`` (null: no
validation), SQuAD JSON (v1.1, or v2.0 with unanswerable questions) or JSONL
(``attnkit.data.squad``). Questions and contexts become windows of at most
``data.max_len`` tokens, ``[CLS] question [SEP] context piece [SEP]``;
consecutive windows of a long context share ``data.doc_stride`` tokens
(``attnkit.data.qa_windows``). A window without the whole answer learns to
point at ``[CLS]``.

Model: ``model.family: encoder_only``, usually started from a pretrained
encoder (``attnkit train --init``, e.g. an imported MiniLM/BERT), with a new
token-level head of two labels, ``start`` and ``end`` (``label_level:
token``, BERT's ``qa_outputs``); the pretrained pooler, which nothing reads
here, is dropped.

Batches: ``train.batch_size`` windows per batch and rank, padded to the
longest; with ``train.group_by_length`` (default) windows of similar length
share a batch. An epoch is one pass over the windows in an order drawn from
a generator seeded with ``train.seed`` (saved for a bit-exact resume).

Objective: the mean of the start and end cross-entropies (padding masked
out), summed over windows (the trainer's "tokens" are windows). Validation:
SQuAD's ``exact_match`` and ``f1`` (percent) of the best span across each
question's windows (``attnkit.evaluation.question_answering``), and ``loss``.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from attnkit.data.classification import length_grouped_order
from attnkit.data.mlm import encoder_vocab_fields
from attnkit.data.qa_windows import QABatch, collate_windows, make_windows, query_limit
from attnkit.data.squad import QAExample, read_squad
from attnkit.data.tokenizers import Tokenizer
from attnkit.errors import ConfigError
from attnkit.evaluation.question_answering import (
    LABELS,
    decode_answers,
    qa_scores,
    span_logits,
    window_logits,
)
from attnkit.models.lm_config import EncoderOnlyConfig
from attnkit.training.runconfig import DataConfig, RunConfig, TokenizerConfig
from attnkit.training.tasks.base import (
    LossSums,
    Task,
    TaskContext,
    TaskInputs,
    build_task_model,
    model_config_from_run,
    saved_int,
    saved_rng,
    unknown_note,
)
from attnkit.training.warm_start import WarmStart

HEAD = ("classifier", "token_classifier")
HEAD_FIELDS = ("num_labels", "label_names", "label_level", "pooler")


def load_questions(data: DataConfig, name: str | None, key: str) -> list[QAExample] | None:
    """The questions of ``{data.dir}/{name}`` (``None`` for no file); errors name ``key``."""
    if name is None:
        return None
    path = Path(data.dir) / name
    if not path.is_file():
        raise ConfigError(f"{key}: {path} is not a file (SQuAD JSON or JSONL)")
    return read_squad(path)


def build_qa_tokenizer(cfg: TokenizerConfig, examples: list[QAExample]) -> Tokenizer:
    """A tokenizer trained on the questions and contexts (a model trained from scratch)."""
    from attnkit.data.tokenizers import BPETokenizer, CharTokenizer

    texts = list({x.context: None for x in examples}) + [x.question for x in examples]
    if cfg.kind == "char":
        return CharTokenizer.train(texts)
    return BPETokenizer.train(texts, vocab_size=cfg.vocab_size)


class QuestionAnsweringTask:
    """Start/end cross-entropy of an encoder-only span extractor on question windows."""

    name: ClassVar[str] = "question_answering"
    betas: ClassVar[tuple[float, float]] = (0.9, 0.999)  # BERT's fine-tuning Adam
    eps: ClassVar[float] = 1e-8

    @classmethod
    def from_run(cls, given: TaskInputs) -> Task:
        """The run's question files; a tokenizer trained on them unless one is given."""
        run = given.run
        train = load_questions(run.data, run.data.one_file("train", run.task), "data.train")
        assert train is not None  # data.train is never null
        valid = load_questions(run.data, run.data.one_file("valid", run.task), "data.valid")
        tokenizer = given.tokenizer or build_qa_tokenizer(run.tokenizer, train)
        return cls(run, tokenizer, train, valid, start=given.start)

    def __init__(
        self,
        run: RunConfig,
        tokenizer: Tokenizer,
        train: list[QAExample],
        valid: list[QAExample] | None = None,
        *,
        start: WarmStart | None = None,
    ) -> None:
        self.run, self.cfg, self.tokenizer = run, run.train, tokenizer
        self.train_data, self.valid_data = train, valid
        defaults: dict[str, object] = {"num_labels": 2, "label_names": LABELS,
                                    "label_level": "token", "pooler": False}  # fmt: skip
        if start is None:  # from scratch: the vocabulary follows the tokenizer
            defaults.update(encoder_vocab_fields(tokenizer))
            defaults.update(type_vocab_size=2)
        for key in ("num_labels", "label_names", "label_level"):
            given = run.model.get(key)
            if given is not None and (tuple(given) if isinstance(given, list) else given) \
                    != defaults[key]:  # fmt: skip
                raise ConfigError(f"model.{key}: question answering has a start and an end "
                                  "label on every token; leave it out")  # fmt: skip
        self.model_config: EncoderOnlyConfig = model_config_from_run(
            run, families=(EncoderOnlyConfig,), defaults=defaults, start=start,
            head_fields=HEAD_FIELDS,
        )  # fmt: skip
        self.start = start
        # another checkpoint's head (a classifier's, a tagger's): a new start/end head
        known = tuple(getattr(start.config, "label_names", ())) if start is not None else ()
        self.restart = HEAD if start is not None and known != LABELS else ()
        self.max_len, self.stride = run.data.max_len, run.data.doc_stride
        if self.max_len > self.model_config.max_len:
            raise ConfigError(
                f"data.max_len: {self.max_len} tokens, but the model has "
                f"{self.model_config.max_len} positions; lower data.max_len"
            )
        self.train_set = make_windows(tokenizer, train, max_len=self.max_len, stride=self.stride)
        self.valid_set = None
        if valid is not None:
            self.valid_set = make_windows(tokenizer, valid, max_len=self.max_len,
                                          stride=self.stride)  # fmt: skip
        self.allow_null = any(x.impossible for x in train)
        self.batch_size = self.cfg.batch_size
        self.context = TaskContext()
        self.order_rng = torch.Generator().manual_seed(self.cfg.seed)
        self.epoch = 0
        self.batch_in_epoch = 0
        self._draw_order()

    def _draw_order(self) -> None:
        """This epoch's batches; the generator's state before them is kept for resume."""
        self._epoch_rng_state = self.order_rng.get_state()
        size = self.batch_size * self.context.dist.world_size
        self.order = length_grouped_order(self.train_set.lengths.tolist(), size, self.order_rng,
                                          group=self.cfg.group_by_length)  # fmt: skip

    def setup(self, context: TaskContext) -> None:
        world = self.context.dist.world_size
        self.context = context
        if context.dist.world_size != world:  # global batches hold batch_size x world
            self.order_rng.set_state(self._epoch_rng_state)
            self._draw_order()

    def build_model(self) -> nn.Module:
        return build_task_model(self.model_config, self.start, head=HEAD, restart=self.restart,
                                freeze=self.cfg.freeze)  # fmt: skip

    def describe(self) -> str:
        windows = self.train_set
        held_out = f", {len(self.valid_data)} for validation" if self.valid_data else ""
        impossible = sum(x.impossible for x in self.train_data)
        none = f" ({impossible} unanswerable)" if impossible else ""
        cut = windows.cut_questions
        cut_note = f", {cut} questions cut to {query_limit(self.max_len)} tokens" if cut else ""
        return (
            f"{len(self.train_data)} training questions{none} in {len(windows)} windows of at "
            f"most {self.max_len} tokens (stride {self.stride}{cut_note}){held_out}, "
            f"{self.batch_size} windows per batch, vocabulary {self.tokenizer.vocab_size}"
            + unknown_note(self.tokenizer, {"the contexts": np.concatenate(windows.contexts)})
        )

    # -- batches -------------------------------------------------------------------

    def next_batch(self) -> tuple[QABatch, bool]:
        if self.batch_in_epoch >= len(self.order):
            self.epoch += 1
            self.batch_in_epoch = 0
            self._draw_order()
        index = self.order[self.batch_in_epoch]
        self.batch_in_epoch += 1
        rows = self.context.dist.shard(range(len(index)))
        keep = [index[i] for i in rows] or index[:1]  # a stand-in: one window, zeroed
        batch = collate_windows(self.train_set, keep, self.tokenizer)
        return batch.to(self.context.device), bool(rows)

    # -- objective -----------------------------------------------------------------

    def loss(self, model: nn.Module, batch: QABatch) -> LossSums:
        with self.context.precision():
            start, end = span_logits(model, batch.ids, batch.token_types)
        padding = batch.ids == self.tokenizer.pad_id
        dtype = torch.promote_types(start.dtype, torch.float32)
        start = start.to(dtype).masked_fill(padding, -1e4)
        end = end.to(dtype).masked_fill(padding, -1e4)
        targets = batch.targets
        loss = (F.cross_entropy(start, targets[:, 0], reduction="sum")
                + F.cross_entropy(end, targets[:, 1], reduction="sum")) / 2  # fmt: skip
        hit = (start.detach().argmax(-1) == targets[:, 0]) & (
            end.detach().argmax(-1) == targets[:, 1]
        )
        return LossSums(loss, loss.detach(), len(batch.windows),
                        {"span_accuracy": float(hit.float().mean())})  # fmt: skip

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> dict[str, float]:
        """Validation ``exact_match``, ``f1`` (percent) and ``loss`` (mean over windows)."""
        if self.valid_set is None or self.valid_data is None:
            return {}
        windows = self.valid_set
        logits = window_logits(model, windows, self.tokenizer, batch_size=max(64, self.batch_size))
        loss = 0.0
        for (start, end), (s, e) in zip(logits, windows.targets.tolist()):
            loss += float(torch.from_numpy(start).log_softmax(-1)[s]
                          + torch.from_numpy(end).log_softmax(-1)[e]) / -2  # fmt: skip
        answers = decode_answers(windows, logits, self.valid_data, allow_null=self.allow_null)
        return {**qa_scores(answers, self.valid_data), "loss": loss / max(len(windows), 1)}

    # -- resume --------------------------------------------------------------------

    def progress(self) -> dict[str, object]:
        return {"epoch": round(self.epoch + self.batch_in_epoch / max(len(self.order), 1), 3)}

    def state_dict(self) -> dict[str, object]:
        return {"epoch": self.epoch, "batch_in_epoch": self.batch_in_epoch,
                "epoch_rng": self._epoch_rng_state}  # fmt: skip

    def load_state_dict(self, state: dict[str, object]) -> None:
        self.epoch = saved_int(state, "epoch")
        self.batch_in_epoch = saved_int(state, "batch_in_epoch")
        self.order_rng.set_state(saved_rng(state, "epoch_rng"))
        self._draw_order()  # the same batches again, the generator past them
