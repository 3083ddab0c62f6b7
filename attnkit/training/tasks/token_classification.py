"""The token classification task: an encoder-only model tags every word (named entities).

Data: ``{data.dir}/{data.train}`` and ``{data.dir}/{data.valid}`` (null: no
validation), CoNLL or JSONL tagged sentences (``attnkit.data.token_tags``) in
IOB1, IOB2/BIO or BIOES (``data.tag_scheme``: ``auto`` detects it), kept as
BIO. The BIO labels of the training file's entity types are the model's
outputs; they go into the model config (``num_labels``, ``label_names``,
``label_level: token``), so every checkpoint carries them. Words are split into
the tokenizer's sub-tokens, the sentence is ``[CLS] ... [SEP]`` cut to
``data.max_len`` tokens (counted), and a word's label sits on its first
sub-token; the others are ignored by the loss.

Model: ``model.family: encoder_only``, usually started from a pretrained
encoder (``attnkit train --init``, e.g. an imported MiniLM/BERT): the token
head (dropout, one linear layer per token) is new, unless the checkpoint
already tags the same labels.

Batches and order as ``text_classification`` (``train.batch_size`` sentences,
``train.group_by_length``, a seeded order saved for a bit-exact resume;
under torchrun each rank keeps rows ``rank, rank + N, ...``).

Objective: cross-entropy summed over labelled words (the trainer's "tokens"
are words here); the train record carries the word accuracy. Validation:
entity-level ``f1``, ``precision`` and ``recall`` (seqeval, micro; every word
of the validation file, the cut ones tagged ``O``), ``f1_<TYPE>`` per type,
and ``loss``, the mean NLL of the kept words' tags.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from attnkit.data.classification import length_grouped_order
from attnkit.data.mlm import encoder_vocab_fields
from attnkit.data.tag_schemes import bio_label_names
from attnkit.data.token_tags import (
    IGNORE,
    TaggedSentences,
    TokenBatch,
    collate_words,
    encode_words,
    read_tagged,
    word_labels,
)
from attnkit.data.tokenizers import Tokenizer
from attnkit.errors import ConfigError
from attnkit.evaluation.token_classification import entity_scores, predict_tags, token_logits
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
from attnkit.training.tasks.label_order import head_label_names
from attnkit.training.warm_start import WarmStart

HEAD = ("token_classifier",)
HEAD_FIELDS = ("num_labels", "label_names", "label_level")


def load_tagged(data: DataConfig, name: str | None, key: str) -> TaggedSentences | None:
    """The sentences of ``{data.dir}/{name}`` (``None`` for no file); errors name ``key``."""
    if name is None:
        return None
    path = Path(data.dir) / name
    if not path.is_file():
        raise ConfigError(f"{key}: {path} is not a file (CoNLL or JSONL tagged sentences)")
    return read_tagged(path, data.tag_scheme)


def build_tagger_tokenizer(cfg: TokenizerConfig, examples: TaggedSentences) -> Tokenizer:
    """A tokenizer trained on the training words (a tagger trained from scratch)."""
    from attnkit.data.tokenizers import BPETokenizer, CharTokenizer

    texts = [" ".join(words) for words in examples.words]
    if cfg.kind == "char":
        return CharTokenizer.train(texts)
    return BPETokenizer.train(texts, vocab_size=cfg.vocab_size)


class TokenClassificationTask:
    """Cross-entropy of an encoder-only token classifier on batches of tagged sentences."""

    name: ClassVar[str] = "token_classification"
    betas: ClassVar[tuple[float, float]] = (0.9, 0.999)  # BERT's fine-tuning Adam
    eps: ClassVar[float] = 1e-8

    @classmethod
    def from_run(cls, given: TaskInputs) -> Task:
        """Tagged sentences; a tokenizer trained on them unless one is given."""
        run = given.run
        data = run.data
        sentences = load_tagged(data, data.one_file("train", run.task), "data.train")
        assert sentences is not None  # data.train is never null
        valid = load_tagged(data, data.one_file("valid", run.task), "data.valid")
        tokenizer = given.tokenizer or build_tagger_tokenizer(run.tokenizer, sentences)
        return cls(run, tokenizer, sentences, valid, start=given.start)

    def __init__(
        self,
        run: RunConfig,
        tokenizer: Tokenizer,
        train: TaggedSentences,
        valid: TaggedSentences | None = None,
        *,
        start: WarmStart | None = None,
    ) -> None:
        self.run, self.cfg, self.tokenizer = run, run.train, tokenizer
        self.train_data, self.valid_data = train, valid
        names = bio_label_names(train.tags)
        known = tuple(getattr(start.config, "label_names", ())) if start else ()
        if start is not None and getattr(start.config, "label_level", "") != "token":
            known = ()  # a sentence classifier's labels are not tags
        names = head_label_names(names, known, run.model.get("label_names"), train.source, "tags")
        if run.model.get("num_labels") not in (None, len(names)):
            raise ConfigError(f"model.num_labels: {run.model['num_labels']}, but "
                              f"{train.source} has {len(names)} BIO labels; leave it out "
                              "(it follows the data)")  # fmt: skip
        if len(names) < 3:
            raise ConfigError(f"data.train: {train.source} tags no entity (only O)")
        defaults: dict[str, object] = {"num_labels": len(names), "label_names": names,
                                    "label_level": "token"}  # fmt: skip
        if start is None:  # from scratch: the vocabulary follows the tokenizer
            defaults.update(encoder_vocab_fields(tokenizer))
        self.model_config: EncoderOnlyConfig = model_config_from_run(
            run, families=(EncoderOnlyConfig,), defaults=defaults, start=start,
            head_fields=HEAD_FIELDS,
        )  # fmt: skip
        self.start = start
        # other labels: a new token head (the checkpoint's rows are other tags)
        self.restart = HEAD if start is not None and known != names else ()
        max_len = run.data.max_len
        if max_len > self.model_config.max_len:
            raise ConfigError(
                f"data.max_len: {max_len} tokens, but the model has {self.model_config.max_len} "
                "positions; lower data.max_len"
            )
        self.label_names = names
        self.train_set = encode_words(tokenizer, train.words, max_len)
        self.train_labels = word_labels(self.train_set, train.tag_ids(names))
        self.valid_set = None
        if valid is not None:  # a tag the training file lacks: an error naming its line
            self.valid_set = encode_words(tokenizer, valid.words, max_len)
            self.valid_labels = word_labels(self.valid_set, valid.tag_ids(names))
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
        self.order = length_grouped_order(self.train_set.lengths, size, self.order_rng,
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
        cut = self.train_set.truncated
        note = f" ({cut} cut to data.max_len={self.run.data.max_len})" if cut else ""
        held_out = f", {len(self.valid_data)} for validation" if self.valid_data else ""
        words = sum(len(w) for w in self.train_data.words)
        return (
            f"{len(self.train_data)} training sentences ({words} words, tags "
            f"{self.train_data.scheme.upper()}, kept as BIO){note}{held_out}, labels "
            f"{', '.join(self.label_names)}, {self.batch_size} sentences per batch, vocabulary "
            f"{self.tokenizer.vocab_size}"
            + unknown_note(self.tokenizer, {"the words": self.train_set.ids})
        )

    # -- batches -------------------------------------------------------------------

    def next_batch(self) -> tuple[TokenBatch, bool]:
        if self.batch_in_epoch >= len(self.order):
            self.epoch += 1
            self.batch_in_epoch = 0
            self._draw_order()
        index = self.order[self.batch_in_epoch]
        self.batch_in_epoch += 1
        rows = self.context.dist.shard(range(len(index)))
        keep = [index[i] for i in rows] or index[:1]  # a stand-in: one sentence, zeroed
        ids = [self.train_set.ids[i] for i in keep]
        batch = collate_words(ids, [self.train_labels[i] for i in keep], self.tokenizer.pad_id)
        return batch.to(self.context.device), bool(rows)

    # -- objective -----------------------------------------------------------------

    def loss(self, model: nn.Module, batch: TokenBatch) -> LossSums:
        labels = batch.labels
        assert labels is not None  # training batches are labelled
        with self.context.precision():
            logits = token_logits(model, batch.ids)
        logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
        flat = labels.reshape(-1)
        loss = F.cross_entropy(logits.reshape(flat.numel(), -1), flat, ignore_index=IGNORE,
                               reduction="sum")  # fmt: skip
        scored = flat != IGNORE
        words = int(scored.sum())
        right = (logits.detach().argmax(-1).reshape(-1) == flat) & scored
        accuracy = float(right.sum()) / max(words, 1)
        return LossSums(loss, loss.detach(), words, {"accuracy": accuracy})

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> dict[str, float]:
        """Validation entity precision, recall and F1, and the mean word NLL (``loss``)."""
        if self.valid_set is None or self.valid_data is None:
            return {}
        predicted = predict_tags(model, self.valid_set, self.valid_data.words, self.label_names,
                                 pad_id=self.tokenizer.pad_id, gold=self.valid_labels,
                                 batch_size=max(64, self.batch_size))  # fmt: skip
        scores = entity_scores(self.valid_data.tags, predicted.tags)
        metrics = {k: scores[k] for k in ("f1", "precision", "recall")}
        metrics["loss"] = predicted.loss or 0.0
        metrics.update({f"f1_{kind}": s["f1"] for kind, s in scores["per_type"].items()})
        return metrics

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
