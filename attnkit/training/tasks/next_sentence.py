"""BERT's pre-training with both objectives: masked LM plus next-sentence prediction.

``task: mlm`` with ``train.nsp: true`` (Devlin et al., 2019, §3.1): every
example is a sentence pair ``[CLS] A [SEP] B [SEP]`` with segment embeddings
(``type_vocab_size: 2``; ``attnkit.data.sentence_pairs``: half the B's follow
A in its document, half come from another document); ``train.mask_prob`` of
the non-special tokens are masked 80/10/10 as in ``mlm``
(``attnkit.data.mlm``); the classification head on ``[CLS]`` (BERT's tanh
pooler, then ``num_labels: 2``: ``is_next``, ``not_next``) predicts the pair's
label. The objective is the mean MLM loss per masked token plus
``train.nsp_weight`` times the mean NSP cross-entropy per pair; the train
record logs both parts (``mlm_loss``, ``nsp_loss``) and the batch's
``nsp_accuracy`` (its ``nll`` is the MLM's).

Data: ``{data.dir}/{data.text}``, read into memory: one sentence per line,
documents separated by blank lines (``data.documents: blank_lines``), or the
whole text one document (``file``: a corpus whose blank lines part units too
short to be documents, such as a play's speeches); the last
``data.valid_fraction`` of the documents (of the sentences, for one document)
are held out. The tokenizer is the resumed run's, ``tokenizer.path``,
or one trained (and, with ``data.loading: prepared``, cached) as for ``mlm``.
Batches: ``train.max_tokens // L`` pairs of at most ``L`` tokens, ``L`` being
``data.block_size`` (at most ``model.max_len``; BERT's first 90% of steps used
128) or else ``model.max_len`` (the longer segment of a pair loses tokens
first, away from the join),
drawn from generators saved for resume; under torchrun every rank draws the
same global batch and keeps rows ``rank, rank + N, ...``.
Validation: ``train.eval_blocks`` held-out pairs (a pair is one block of up to
``L`` tokens), and their masks, drawn from ``train.seed`` so every
evaluation scores the same ones: ``mlm_loss``, ``ppl`` (the MLM's), ``nsp_loss``,
``nsp_accuracy`` and ``loss`` (the objective).
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnkit.data.classification import collate_examples
from attnkit.data.formats import iter_text_pieces, text_inputs
from attnkit.data.mlm import IGNORE_INDEX, mask_tokens, mlm_vocab
from attnkit.data.prepared import text_tokenizer, train_on_text
from attnkit.data.sentence_pairs import LABEL_NAMES, SentencePairs, split_pairs
from attnkit.data.tokenizers import Tokenizer
from attnkit.errors import ConfigError
from attnkit.models import EncoderOnlyConfig
from attnkit.models.encoder_only import EncoderOnlyOutput
from attnkit.training.runconfig import RunConfig
from attnkit.training.tasks.base import (
    LossSums,
    Task,
    TaskContext,
    TaskInputs,
    build_task_model,
    check_vocab_fits,
    model_config_from_run,
    saved_rng,
    with_moe_losses,
)
from attnkit.training.tasks.corpus import _given_tokenizer, cache_root
from attnkit.training.warm_start import WarmStart

Batch = tuple[Tensor, Tensor, Tensor, Tensor]  # inputs, token types, MLM labels, NSP labels


class NextSentenceTask:
    """Masked LM + next-sentence prediction on sentence pairs, one ``EncoderOnlyModel``."""

    name: ClassVar[str] = "mlm"
    betas: ClassVar[tuple[float, float]] = (0.9, 0.999)  # BERT's Adam
    eps: ClassVar[float] = 1e-6

    @classmethod
    def from_run(cls, given: TaskInputs) -> Task:
        """``mlm`` with ``train.nsp``: sentence pairs from ``data.text``'s documents."""
        run, log = given.run, given.log
        data = run.data
        if data.text is None:
            raise ConfigError("data.text: train.nsp reads one text file (one sentence per line, "
                              "blank lines between documents); set data.text")  # fmt: skip
        if data.loading == "streaming":
            raise ConfigError("data.loading: streaming applies to translation; train.nsp reads "
                              "its text into memory")  # fmt: skip
        inputs = text_inputs(data.dir, data.text)
        tokenizer = _given_tokenizer(run, given.tokenizer)
        if tokenizer is None and data.loading == "memory":
            tokenizer = train_on_text(inputs, run.tokenizer)[0]
        elif tokenizer is None:
            tokenizer = text_tokenizer(inputs, run.tokenizer, root=cache_root(run), log=log)
        text = "".join(iter_text_pieces(inputs))
        if data.documents == "file":  # one document: NotNext B starts anywhere but after A
            text = "\n".join(line for line in text.splitlines() if line.strip())
        fraction = data.held_out_fraction(run.task)
        train, valid = split_pairs(text, tokenizer, fraction, name=f"data.text {data.text}")
        return cls(run, tokenizer, train, valid, start=given.start)

    def __init__(
        self,
        run: RunConfig,
        tokenizer: Tokenizer,
        train: SentencePairs,
        valid: SentencePairs | None,
        *,
        start: WarmStart | None = None,
    ) -> None:
        self.run, self.cfg, self.tokenizer = run, run.train, tokenizer
        self.train, self.valid, self.start = train, valid, start
        vocab_size, mask_id = mlm_vocab(tokenizer)
        defaults = {"vocab_size": vocab_size, "mask_id": mask_id, "pad_id": tokenizer.pad_id,
                    "bos_id": tokenizer.bos_id, "eos_id": tokenizer.eos_id, "num_labels": 2,
                    "label_names": LABEL_NAMES, "type_vocab_size": 2}  # fmt: skip
        self.model_config: EncoderOnlyConfig = model_config_from_run(
            run, families=(EncoderOnlyConfig,), defaults=defaults, start=start,
            head_fields=("num_labels", "label_names"),
        )  # fmt: skip
        c = self.model_config
        check_vocab_fits(c, ("vocab_size",), tokenizer)
        if c.type_vocab_size < 2:
            raise ConfigError(f"model.type_vocab_size: train.nsp reads sentence pairs with two "
                              f"segments, got {c.type_vocab_size}")  # fmt: skip
        if c.num_labels != 2:
            raise ConfigError(f"model.num_labels: train.nsp's head has 2 labels (is_next, "
                              f"not_next), got {c.num_labels}")  # fmt: skip
        if c.pooling != "first":
            raise ConfigError(f"model.pooling: train.nsp's head reads [CLS] (pooling: first), "
                              f"got {c.pooling}")  # fmt: skip
        # A pair is cut to data.block_size tokens, or to the model's positions: BERT trained
        # 90% of its steps on 128-token pairs and the rest on 512 (Devlin et al., 2019, A.2),
        # and a model imported with 512 positions can do the same.
        block = run.data.block_size
        if block is not None and block > c.max_len:
            raise ConfigError(f"data.block_size: {block} tokens per pair, the model has "
                              f"{c.max_len} positions (model.max_len)")  # fmt: skip
        self.max_len = block if block is not None else c.max_len
        if self.max_len < 5:
            key = "data.block_size" if block is not None else "model.max_len"
            raise ConfigError(f"{key}: {self.max_len} positions leave no room for a pair "
                              "[CLS] A [SEP] B [SEP]")  # fmt: skip
        self.batch_size = max(1, self.cfg.max_tokens // self.max_len)  # pairs per batch and rank
        self.special_ids = tokenizer.special_ids
        self.batch_rng = torch.Generator().manual_seed(self.cfg.seed)
        self.mask_rng = torch.Generator().manual_seed(self.cfg.seed + 1)
        self.context = TaskContext()
        self._valid_batches = self._held_out() if valid is not None else []

    def setup(self, context: TaskContext) -> None:
        self.context = context

    def build_model(self) -> nn.Module:
        return build_task_model(
            self.model_config, self.start, head=("classifier",), freeze=self.cfg.freeze
        )

    def describe(self) -> str:
        held_out = len(self.valid.sentences) if self.valid is not None else 0
        return (
            f"{len(self.train.sentences)} training and {held_out} held-out sentences "
            f"({len(self.train.firsts)} training sentences with a next one), vocabulary "
            f"{self.tokenizer.vocab_size}, {self.batch_size} pairs of up to {self.max_len} "
            f"tokens per batch, MLM + {self.cfg.nsp_weight:g} x NSP"
        )

    # -- batches -------------------------------------------------------------------------

    def make_batch(
        self, pairs: SentencePairs, n: int, pair_rng: torch.Generator, mask_rng: torch.Generator
    ) -> Batch:
        """``n`` pairs drawn from ``pairs``, padded, and masked for the MLM."""
        c = self.model_config
        drawn = pairs.sample(n, pair_rng, bos_id=c.bos_id, eos_id=c.eos_id, max_len=self.max_len)
        collated = collate_examples(drawn.ids, drawn.types, drawn.labels, c.pad_id)
        assert collated.token_types is not None and collated.labels is not None
        inputs, mlm_labels = mask_tokens(
            collated.ids, vocab_size=c.vocab_size, mask_id=c.mask_id,
            special_ids=self.special_ids, prob=self.cfg.mask_prob, generator=mask_rng,
        )  # fmt: skip
        return inputs, collated.token_types, mlm_labels, collated.labels

    def next_batch(self) -> tuple[Batch, bool]:
        dist = self.context.dist
        pairs = self.batch_size * dist.world_size  # the global batch, shared out by rows
        batch = self.make_batch(self.train, pairs, self.batch_rng, self.mask_rng)
        rows = torch.tensor(dist.shard(range(pairs)), dtype=torch.long)
        inputs, types, mlm_labels, nsp_labels = (
            t.index_select(0, rows).to(self.context.device) for t in batch
        )
        return (inputs, types, mlm_labels, nsp_labels), True

    def _held_out(self) -> list[Batch]:
        """The same held-out pairs and masks at every evaluation (seeded from train.seed)."""
        assert self.valid is not None
        pair_rng = torch.Generator().manual_seed(self.cfg.seed + 2)
        mask_rng = torch.Generator().manual_seed(self.cfg.seed + 3)
        total = self.cfg.eval_blocks
        sizes = [self.batch_size] * (total // self.batch_size)
        sizes += [total % self.batch_size] if total % self.batch_size else []
        return [self.make_batch(self.valid, n, pair_rng, mask_rng) for n in sizes]

    # -- objective -----------------------------------------------------------------------

    def _forward(
        self, model: nn.Module, batch: Batch
    ) -> tuple[Tensor, Tensor, int, EncoderOnlyOutput]:
        """``(MLM NLL sum, NSP logits (B, 2), masked tokens, the model's output)``."""
        inputs, types, mlm_labels, _ = batch
        selected = mlm_labels != IGNORE_INDEX
        with self.context.precision():
            out = model(inputs, token_types=types, mlm_positions=selected)
        mlm = F.cross_entropy(out.mlm_logits.float(), mlm_labels[selected], reduction="sum")
        return mlm, out.class_logits.float(), int(selected.sum()), out

    def loss(self, model: nn.Module, batch: Batch) -> LossSums:
        mlm, logits, count, out = self._forward(model, batch)
        nsp_labels = batch[3]
        nsp = F.cross_entropy(logits, nsp_labels)  # mean per pair
        # The trainer divides the loss by the update's token count (masked tokens here):
        # the NSP mean scaled by this batch's count makes the objective
        # mean MLM loss + nsp_weight * mean NSP loss (a batch with no masked token: 1).
        scale = max(count, 1)
        sums = with_moe_losses(mlm + self.cfg.nsp_weight * nsp * scale, mlm.detach(), scale,
                               out.moe, self.model_config)  # fmt: skip
        correct = (logits.detach().argmax(-1) == nsp_labels).float().mean()
        sums.metrics["mlm_loss"] = float(mlm.detach()) / scale
        sums.metrics["nsp_loss"] = float(nsp.detach())
        sums.metrics["nsp_accuracy"] = float(correct)
        return sums

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> dict[str, float]:
        if not self._valid_batches:
            return {}
        was_training = model.training
        model.eval()
        device = self.context.device
        mlm = nsp = correct = 0.0
        masked = pairs = 0
        for batch in self._valid_batches:
            batch = tuple(t.to(device) for t in batch)  # type: ignore[assignment]
            mlm_sum, logits, count, _ = self._forward(model, batch)
            nsp_labels = batch[3]
            mlm += float(mlm_sum)
            masked += count
            nsp += float(F.cross_entropy(logits, nsp_labels, reduction="sum"))
            correct += float((logits.argmax(-1) == nsp_labels).sum())
            pairs += nsp_labels.numel()
        model.train(was_training)
        mlm_loss, nsp_loss = mlm / max(masked, 1), nsp / pairs
        return {"loss": mlm_loss + self.cfg.nsp_weight * nsp_loss, "mlm_loss": mlm_loss,
                "ppl": math.exp(min(mlm_loss, 700.0)), "nsp_loss": nsp_loss,
                "nsp_accuracy": correct / pairs}  # fmt: skip

    # -- resume --------------------------------------------------------------------------

    def progress(self) -> dict[str, object]:
        return {}

    def state_dict(self) -> dict[str, object]:
        return {"batch_rng": self.batch_rng.get_state(), "mask_rng": self.mask_rng.get_state()}

    def load_state_dict(self, state: dict[str, object]) -> None:
        self.batch_rng.set_state(saved_rng(state, "batch_rng"))
        self.mask_rng.set_state(saved_rng(state, "mask_rng"))
