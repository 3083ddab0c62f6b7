"""The language-model tasks on one text file: causal LM (GPT) and masked LM (BERT).

Data (both): the file's token ids, split 90/10 (``data.valid_fraction``),
cut into blocks of ``data.block_size`` tokens (default: the model's context
length, ``model.max_len``) at random offsets, ``train.max_tokens // block``
blocks per batch and rank, drawn
from a seeded CPU generator whose state is saved for resume (nanoGPT's
recipe). Under torchrun every rank draws the same global batch and keeps its
rows ``rank, rank + N, ...``.

With ``model.ffn: moe`` both add the routers' auxiliary losses
(``tasks/base.py``: ``with_moe_losses``) and log expert utilisation.

* ``lm`` (``CausalLMTask``, a ``DecoderOnlyLM``): next-token cross-entropy.
* ``mlm`` (``MaskedLMTask``, an ``EncoderOnlyModel``): 15% of the tokens
  selected (``train.mask_prob``), 80/10/10 mask/random/keep
  (``attnkit.data.mlm``), cross-entropy at the selected positions only. The
  masks are drawn for the global batch before it is shared out, from a
  generator saved for resume; validation masks come from a fixed seed, so
  two evaluations of the same weights give the same number.

Validation: the mean loss per scored token and the perplexity over the first
``train.eval_blocks`` non-overlapping blocks of the validation split.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar, Generic, TypeVar, cast

import torch
from torch import Tensor, nn

from attnkit.data.lm import LMBlocks, LMCorpus, as_tensor, num_tokens
from attnkit.data.mlm import mask_tokens, mlm_vocab
from attnkit.evaluation.perplexity import (
    causal_lm_forward,
    masked_lm_forward,
    mlm_special_ids,
    text_perplexity,
)
from attnkit.models import DecoderOnlyConfig, EncoderOnlyConfig
from attnkit.models.protocols import LanguageModel
from attnkit.training.runconfig import RunConfig
from attnkit.training.tasks.base import (
    LossSums,
    Task,
    TaskContext,
    TaskInputs,
    build_task_model,
    check_vocab_fits,
    context_block,
    model_config_from_run,
    saved_rng,
    unknown_note,
    with_moe_losses,
)
from attnkit.training.tasks.corpus import lm_corpus
from attnkit.training.tasks.next_sentence import NextSentenceTask
from attnkit.training.warm_start import WarmStart

Batch = tuple[Tensor, Tensor]
LMConfig = TypeVar("LMConfig", DecoderOnlyConfig, EncoderOnlyConfig)


class _BlockTask(Generic[LMConfig]):
    """What both language-model tasks share: blocks of one token stream."""

    name: ClassVar[str]
    betas: ClassVar[tuple[float, float]] = (0.9, 0.99)  # nanoGPT's
    eps: ClassVar[float] = 1e-8
    # Model fields that may differ from an --init checkpoint's, and the modules they
    # rebuild (an MLM started from a classifier drops its classification head).
    head_fields: ClassVar[tuple[str, ...]] = ()
    head: ClassVar[tuple[str, ...]] = ()

    def __init__(
        self,
        run: RunConfig,
        corpus: LMCorpus,
        config_class: type[LMConfig],
        release: Callable[[], None] | None = None,
        *,
        start: WarmStart | None = None,
    ) -> None:
        """``release``: hands back the pages of a memory-mapped corpus read so far."""
        self.run, self.cfg, self.tokenizer = run, run.train, corpus.tokenizer
        self.corpus = corpus
        self.start = start  # --init: the checkpoint whose weights the model starts from
        self.model_config: LMConfig = model_config_from_run(
            run, families=(config_class,), defaults=self._model_defaults(), start=start,
            head_fields=self.head_fields,
        )  # fmt: skip
        check_vocab_fits(self.model_config, ("vocab_size",), self.tokenizer)
        block = self.block = context_block(run.data.block_size, self.model_config.max_len)
        self.train_blocks = LMBlocks(corpus.train, block, name="train split",
                                     size_name="data.block_size or model.max_len",
                                     release=release)  # fmt: skip
        self.batch_size = max(1, self.cfg.max_tokens // block)  # blocks per batch and rank
        self.batch_rng = torch.Generator().manual_seed(self.cfg.seed)
        self.context = TaskContext()

    def _model_defaults(self) -> dict[str, object]:
        tok = self.tokenizer
        return {"vocab_size": tok.vocab_size, "pad_id": tok.pad_id, "bos_id": tok.bos_id,
                "eos_id": tok.eos_id}  # fmt: skip

    def setup(self, context: TaskContext) -> None:
        self.context = context

    def build_model(self) -> nn.Module:
        return build_task_model(
            self.model_config, self.start, head=self.head, freeze=self.cfg.freeze
        )

    def describe(self) -> str:
        # A tokenizer that came with the checkpoint may not know this text.
        train = self.corpus.train
        unknown = "" if self.start is None else unknown_note(self.tokenizer, {"the text": train})
        return (
            f"{num_tokens(self.corpus.train)} training tokens, {num_tokens(self.corpus.valid)} "
            f"validation tokens, vocabulary {self.tokenizer.vocab_size}, {self.batch_size} "
            f"blocks of {self.block} tokens per batch{unknown}"
        )

    def _global_batch(self) -> Batch:
        world = self.context.dist.world_size
        return self.train_blocks.sample(self.batch_size * world, self.batch_rng)

    def _share(self, *tensors: Tensor) -> tuple[Tensor, ...]:
        """This rank's rows of the global batch, on its device."""
        dist = self.context.dist
        rows = torch.tensor(dist.shard(range(tensors[0].size(0))), dtype=torch.long)
        return tuple(t.index_select(0, rows.to(t.device)).to(self.context.device) for t in tensors)

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        block = self.block
        if num_tokens(self.corpus.valid) <= block:
            return {}  # shorter than one block
        metrics = text_perplexity(
            cast(LanguageModel, model),  # the model build_model made (the trainer's)
            # only what the first eval_blocks blocks read (a prepared split may be huge)
            as_tensor(self.corpus.valid, self.cfg.eval_blocks * block + 1),
            masked=self.name == "mlm",
            batch_size=self.batch_size,
            max_blocks=self.cfg.eval_blocks,
            special_ids=mlm_special_ids(self.tokenizer),
            mask_prob=self.cfg.mask_prob,
            seed=self.cfg.seed,  # the same masks every time
            block_size=self.block,
        )
        return {"loss": metrics["loss"], "ppl": metrics["ppl"]}

    def progress(self) -> dict[str, object]:
        return {}

    def state_dict(self) -> dict[str, object]:
        return {"batch_rng": self.batch_rng.get_state()}

    def load_state_dict(self, state: dict[str, object]) -> None:
        self.batch_rng.set_state(saved_rng(state, "batch_rng"))


class CausalLMTask(_BlockTask[DecoderOnlyConfig]):
    """Next-token prediction with a ``DecoderOnlyLM``."""

    name: ClassVar[str] = "lm"

    @classmethod
    def from_run(cls, given: TaskInputs) -> Task:
        """One text file, prepared or reused (``tasks/corpus.py``)."""
        corpus, release = lm_corpus(given.run, given.tokenizer, log=given.log)
        return cls(given.run, corpus, release, start=given.start)

    def __init__(
        self,
        run: RunConfig,
        corpus: LMCorpus,
        release: Callable[[], None] | None = None,
        *,
        start: WarmStart | None = None,
    ) -> None:
        super().__init__(run, corpus, DecoderOnlyConfig, release, start=start)

    def next_batch(self) -> tuple[Batch, bool]:
        x, y = self._share(*self._global_batch())
        return (x, y), True

    def loss(self, model: nn.Module, batch: Batch) -> LossSums:
        with self.context.precision():
            nll, count, out = causal_lm_forward(model, *batch)
        return with_moe_losses(nll, nll.detach(), count, out.moe, self.model_config)


class MaskedLMTask(_BlockTask[EncoderOnlyConfig]):
    """Masked-token prediction with an ``EncoderOnlyModel`` (no classification head)."""

    name: ClassVar[str] = "mlm"
    head_fields: ClassVar[tuple[str, ...]] = ("num_labels",)
    head: ClassVar[tuple[str, ...]] = ("classifier",)

    @classmethod
    def from_run(cls, given: TaskInputs) -> Task:
        """One text file; with ``train.nsp``, its sentence pairs too (``NextSentenceTask``)."""
        if given.run.train.nsp:
            return NextSentenceTask.from_run(given)
        corpus, release = lm_corpus(given.run, given.tokenizer, log=given.log)
        return cls(given.run, corpus, release, start=given.start)

    def __init__(
        self,
        run: RunConfig,
        corpus: LMCorpus,
        release: Callable[[], None] | None = None,
        *,
        start: WarmStart | None = None,
    ) -> None:
        super().__init__(run, corpus, EncoderOnlyConfig, release, start=start)
        self.special_ids = mlm_special_ids(self.tokenizer)
        self.mask_rng = torch.Generator().manual_seed(self.cfg.seed + 1)

    def _model_defaults(self) -> dict[str, object]:
        # One more id than the tokenizer has, for the mask token; no classifier.
        vocab_size, mask_id = mlm_vocab(self.tokenizer)
        return {**super()._model_defaults(), "vocab_size": vocab_size, "mask_id": mask_id,
                "num_labels": 0}  # fmt: skip

    def _mask(self, x: Tensor, generator: torch.Generator) -> Batch:
        c = self.model_config
        return mask_tokens(
            x,
            vocab_size=c.vocab_size,
            mask_id=c.mask_id,
            special_ids=self.special_ids,
            prob=self.cfg.mask_prob,
            generator=generator,
        )

    def next_batch(self) -> tuple[Batch, bool]:
        x, _ = self._global_batch()
        inputs, labels = self._share(*self._mask(x, self.mask_rng))
        return (inputs, labels), True

    def loss(self, model: nn.Module, batch: Batch) -> LossSums:
        with self.context.precision():
            nll, count, out = masked_lm_forward(model, *batch)
        return with_moe_losses(nll, nll.detach(), count, out.moe, self.model_config)

    def state_dict(self) -> dict[str, object]:
        return {**super().state_dict(), "mask_rng": self.mask_rng.get_state()}

    def load_state_dict(self, state: dict[str, object]) -> None:
        super().load_state_dict(state)
        self.mask_rng.set_state(saved_rng(state, "mask_rng"))
