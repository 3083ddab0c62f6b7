"""The text classification task: an encoder-only model labels sentences or sentence pairs.

Data: ``{data.dir}/{data.train}`` and ``{data.dir}/{data.valid}`` (null: no
validation), TSV or JSONL (``attnkit.data.classification``). The labels of
the training file, in order, are the classifier's outputs; they go into the
model config (``num_labels``, ``label_names``), so every checkpoint carries
them. Examples are encoded once as ``[CLS] a [SEP] (b [SEP])`` and cut to
``data.max_len`` tokens (counted).

Model: ``model.family: encoder_only``, usually started from a pretrained
encoder (``attnkit train --init``, e.g. an imported MiniLM/BERT): its
classification head (``ClassificationHead``: the ``pooling`` summary,
``"first"`` token or ``"mean"`` over real tokens, through BERT's tanh pooler)
is new, unless the checkpoint is already a classifier of the same labels.
Sentence pairs use the model's segment embeddings where it has them
(``type_vocab_size > 0``; BERT and MiniLM do); without them the pair is told
apart by its ``[SEP]`` only, and the start line says so.

Batches: ``train.batch_size`` examples per batch and rank, padded to the
longest in the batch; with ``train.group_by_length`` (default) examples of
similar length share a batch (windows of 50 batches sorted by length; little
padding is computed). An epoch is one pass in an order drawn from a generator
seeded with ``train.seed``, saved for a bit-exact resume. Under torchrun every
rank cuts the same global batch and keeps rows ``rank, rank + N, ...``.

Objective: cross-entropy summed over examples (the trainer's "tokens" are
examples here); the train record carries the batch accuracy. Validation:
``accuracy``, ``macro_f1`` and ``loss`` (mean NLL) on the validation file.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from attnkit.data.classification import (
    ClassificationBatch,
    LabelledTexts,
    collate_examples,
    label_names,
    length_grouped_order,
    read_labelled,
)
from attnkit.data.mlm import encoder_vocab_fields
from attnkit.data.tokenizers import Tokenizer
from attnkit.errors import ConfigError
from attnkit.evaluation.text_classification import (
    EncodedExamples,
    classification_metrics,
    classifier_logits,
    encode_texts,
    predict_probs,
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
from attnkit.training.tasks.label_order import head_label_names
from attnkit.training.warm_start import WarmStart

HEAD = ("classifier",)
HEAD_FIELDS = ("num_labels", "label_names")


def load_labelled(data: DataConfig, name: str | None, key: str) -> LabelledTexts | None:
    """The examples of ``{data.dir}/{name}`` (``None`` for no file); errors name ``key``."""
    if name is None:
        return None
    path = Path(data.dir) / name
    if not path.is_file():
        raise ConfigError(f"{key}: {path} is not a file (TSV or JSONL labelled examples)")
    return read_labelled(path)


def build_classifier_tokenizer(cfg: TokenizerConfig, examples: LabelledTexts) -> Tokenizer:
    """A tokenizer trained on the training texts (a classifier trained from scratch)."""
    from attnkit.data.tokenizers import BPETokenizer, CharTokenizer

    texts = examples.texts + (examples.pairs or [])
    if cfg.kind == "char":
        return CharTokenizer.train(texts)
    return BPETokenizer.train(texts, vocab_size=cfg.vocab_size)


class TextClassificationTask:
    """Cross-entropy of an encoder-only classifier on batches of labelled texts."""

    name: ClassVar[str] = "text_classification"
    betas: ClassVar[tuple[float, float]] = (0.9, 0.999)  # BERT's fine-tuning Adam
    eps: ClassVar[float] = 1e-8

    @classmethod
    def from_run(cls, given: TaskInputs) -> Task:
        """Labelled sentences or pairs; a tokenizer trained on them unless one is given."""
        run = given.run
        data = run.data
        examples = load_labelled(data, data.one_file("train", run.task), "data.train")
        assert examples is not None  # data.train is never null
        valid_examples = load_labelled(data, data.one_file("valid", run.task), "data.valid")
        tokenizer = given.tokenizer or build_classifier_tokenizer(run.tokenizer, examples)
        return cls(run, tokenizer, examples, valid_examples, start=given.start)

    def __init__(
        self,
        run: RunConfig,
        tokenizer: Tokenizer,
        train: LabelledTexts,
        valid: LabelledTexts | None = None,
        *,
        start: WarmStart | None = None,
    ) -> None:
        self.run, self.cfg, self.tokenizer = run, run.train, tokenizer
        self.train_data, self.valid_data = train, valid
        names = label_names(train.labels)
        known = tuple(getattr(start.config, "label_names", ())) if start else ()
        names = head_label_names(names, known, run.model.get("label_names"), train.source,
                                 "labels")  # fmt: skip
        given = run.model.get("num_labels")
        if given is not None and given != len(names):
            raise ConfigError(f"model.num_labels: {given}, but {train.source} has {len(names)} "
                              "labels; leave it out (it follows the data)")  # fmt: skip
        if len(names) < 2:
            raise ConfigError(f"data.train: {train.source} has one label ({names[0]!r}); "
                              "a classifier needs at least two")  # fmt: skip
        defaults: dict[str, object] = {"num_labels": len(names), "label_names": names}
        if start is None:  # from scratch: the vocabulary follows the tokenizer
            defaults.update(encoder_vocab_fields(tokenizer))
            defaults.update(type_vocab_size=2 if train.pairs is not None else 0)
        self.model_config: EncoderOnlyConfig = model_config_from_run(
            run, families=(EncoderOnlyConfig,), defaults=defaults, start=start,
            head_fields=HEAD_FIELDS,
        )  # fmt: skip
        self.start = start
        # Other labels: new output rows, fresh; the pooler (trained, or an import's
        # pretrained one) is kept, as transformers does.
        self.restart = ("classifier.classifier",) if start is not None and known != names else ()
        max_len = run.data.max_len
        if max_len > self.model_config.max_len:
            raise ConfigError(
                f"data.max_len: {max_len} tokens, but the model has {self.model_config.max_len} "
                "positions; lower data.max_len"
            )
        self.label_names = names
        self.train_set = encode_texts(tokenizer, train.texts, train.pairs, max_len)
        self.train_labels = train.label_ids(names)
        self.valid_set: EncodedExamples | None = None
        if valid is not None:
            if (valid.pairs is None) != (train.pairs is None):
                raise ConfigError(f"data.valid: {valid.source} and {train.source} differ: one "
                                  "holds sentence pairs, the other single sentences")  # fmt: skip
            self.valid_set = encode_texts(tokenizer, valid.texts, valid.pairs, max_len)
            self.valid_labels = torch.tensor(valid.label_ids(names))
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
        c = self.model_config
        pairs = self.train_data.pairs is not None
        what = "sentence pairs" if pairs else "sentences"
        held_out = f", {len(self.valid_data)} for validation" if self.valid_data else ""
        cut = self.train_set.truncated
        note = f" ({cut} cut to data.max_len={self.run.data.max_len})" if cut else ""
        segments = ""
        if pairs:
            segments = (" with segment embeddings" if c.type_vocab_size else
                        "; the model has no segment embeddings (type_vocab_size=0): pairs are "
                        "told apart by [SEP] only")  # fmt: skip
        return (
            f"{len(self.train_data)} training {what}{segments}{note}{held_out}, labels "
            f"{', '.join(self.label_names)}, {c.pooling} pooling, {self.batch_size} examples "
            f"per batch, vocabulary {self.tokenizer.vocab_size}"
            + unknown_note(self.tokenizer, {"the texts": self.train_set.ids})
        )

    # -- batches -------------------------------------------------------------------

    def next_batch(self) -> tuple[ClassificationBatch, bool]:
        if self.batch_in_epoch >= len(self.order):
            self.epoch += 1
            self.batch_in_epoch = 0
            self._draw_order()
        index = self.order[self.batch_in_epoch]
        self.batch_in_epoch += 1
        rows = self.context.dist.shard(range(len(index)))
        keep = [index[i] for i in rows] or index[:1]  # a stand-in: one example, zeroed
        s = self.train_set
        batch = collate_examples(
            [s.ids[i] for i in keep],
            [s.types[i] for i in keep] if s.pairs else None,
            [self.train_labels[i] for i in keep],
            self.tokenizer.pad_id,
        )
        return batch.to(self.context.device), bool(rows)

    # -- objective -----------------------------------------------------------------

    def loss(self, model: nn.Module, batch: ClassificationBatch) -> LossSums:
        labels = batch.labels
        assert labels is not None  # training batches are labelled
        with self.context.precision():
            logits = classifier_logits(model, batch.ids, batch.token_types)
        logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
        loss = F.cross_entropy(logits, labels, reduction="sum")
        accuracy = (logits.detach().argmax(-1) == labels).float().mean()
        return LossSums(loss, loss.detach(), labels.numel(), {"accuracy": float(accuracy)})

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> dict[str, float]:
        """Validation accuracy, macro-F1 and loss (the same on every rank)."""
        if self.valid_set is None:
            return {}
        probs = predict_probs(model, self.valid_set, pad_id=self.tokenizer.pad_id,
                              batch_size=max(64, self.batch_size))  # fmt: skip
        return classification_metrics(probs, self.valid_labels)

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
