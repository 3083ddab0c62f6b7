"""``task: span_corruption``: T5's pre-training on any text file (Raffel et al., 2020, §3.1.4).

Data: one text file, as ``lm``/``mlm`` read it (``data.text``, split by
``data.valid_fraction``, prepared or in memory: ``tasks/corpus.py``), cut into
blocks of ``data.block_size`` tokens (default: the model's ``max_len``) at
random offsets from a seeded generator saved for resume,
``train.max_tokens // block`` blocks per batch and rank. Each block is
corrupted by ``attnkit.data.span_corruption.span_corrupt``: ``train.mask_prob``
of its tokens (default 15%) dropped in spans of mean length 3, each span
replaced by a sentinel in the input and listed after it in the target; the
input ends with EOS, the decoder reads BOS + target and predicts target + EOS
(``collate_translation``). The noise comes from its own generator, also saved.

Sentinels: the tokenizer's vocabulary has none, so the model gets one id per
span a block can hold after the tokenizer's ids (``vocab_size + i``, as
``mlm`` adds its mask token), and both vocabularies are ``tokenizer.vocab_size
+ sentinels``. Model: an encoder-decoder, preset ``t5_small_cpu`` unless the
``model`` section says otherwise (any ``TransformerConfig`` trains).

Validation: the loss and perplexity per target token over the first
``train.eval_blocks`` non-overlapping blocks of the validation split, corrupted
from a fixed seed (two evaluations of the same weights agree).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import torch
from torch import Tensor, nn

from attnkit.data.collate import TranslationBatch, collate_translation
from attnkit.data.lm import LMBlocks, LMCorpus, as_tensor, num_tokens
from attnkit.data.span_corruption import noise_counts, span_corrupt
from attnkit.errors import ConfigError
from attnkit.evaluation.perplexity import perplexity
from attnkit.losses import LossOutput, label_smoothed_cross_entropy
from attnkit.models import TransformerConfig
from attnkit.training.runconfig import RunConfig
from attnkit.training.tasks.base import (
    LossSums,
    Task,
    TaskContext,
    TaskInputs,
    build_task_model,
    context_block,
    model_config_from_run,
    saved_rng,
    unknown_note,
    with_moe_losses,
)
from attnkit.training.tasks.corpus import lm_corpus
from attnkit.training.warm_start import WarmStart

MEAN_SPAN = 3.0  # T5's mean span length


class SpanCorruptionTask:
    """T5's span corruption with an ``EncoderDecoder`` (see the module doc)."""

    name: ClassVar[str] = "span_corruption"
    betas: ClassVar[tuple[float, float]] = (0.9, 0.98)  # the paper's Adam, as translation
    eps: ClassVar[float] = 1e-9

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
        """``release``: hands back the pages of a memory-mapped corpus read so far."""
        self.run, self.cfg, self.corpus = run, run.train, corpus
        self.tokenizer = corpus.tokenizer
        self.start = start
        self.noise_density = self.cfg.mask_prob
        # The block follows the config (max_len) and the vocabulary the block (one
        # sentinel per span): a first config gives the block, the second the sizes.
        config = self._config(1)
        block = self.block = context_block(run.data.block_size, config.max_len)
        spans = noise_counts(block, self.noise_density, MEAN_SPAN)[1] if block > 1 else 1
        self.model_config: TransformerConfig = self._config(spans)
        first = self.tokenizer.vocab_size
        self.sentinels = list(range(first, first + spans))
        c = self.model_config
        if min(c.src_vocab_size, c.tgt_vocab_size) < first + spans:
            raise ConfigError(
                f"model.src_vocab_size: {c.src_vocab_size} has no room for the tokenizer's "
                f"{first} ids and {spans} sentinels; leave the vocabulary sizes out (they "
                "follow the tokenizer)"
            )
        self.train_blocks = LMBlocks(corpus.train, block, name="train split",
                                     size_name="data.block_size or model.max_len",
                                     release=release)  # fmt: skip
        self.batch_size = max(1, self.cfg.max_tokens // block)
        self.batch_rng = torch.Generator().manual_seed(self.cfg.seed)
        self.noise_rng = torch.Generator().manual_seed(self.cfg.seed + 1)
        self.context = TaskContext()

    def _config(self, sentinels: int) -> TransformerConfig:
        tok = self.tokenizer
        vocab = tok.vocab_size + sentinels
        defaults = {"src_vocab_size": vocab, "tgt_vocab_size": vocab, "pad_id": tok.pad_id,
                    "bos_id": tok.bos_id, "eos_id": tok.eos_id}  # fmt: skip
        return model_config_from_run(
            self.run, families=(TransformerConfig,), defaults=defaults, preset="t5_small_cpu",
            start=self.start,
        )  # fmt: skip

    def setup(self, context: TaskContext) -> None:
        self.context = context

    def build_model(self) -> nn.Module:
        return build_task_model(self.model_config, self.start, freeze=self.cfg.freeze)

    def describe(self) -> str:
        train = self.corpus.train
        unknown = "" if self.start is None else unknown_note(self.tokenizer, {"the text": train})
        return (
            f"{num_tokens(train)} training tokens, {num_tokens(self.corpus.valid)} validation "
            f"tokens, vocabulary {self.tokenizer.vocab_size} + {len(self.sentinels)} sentinels, "
            f"{self.batch_size} blocks of {self.block} tokens per batch, "
            f"{100 * self.noise_density:g}% noise in spans of mean {MEAN_SPAN:g}{unknown}"
        )

    def corrupt(self, blocks: Tensor, generator: torch.Generator) -> TranslationBatch:
        """Blocks ``(B, T)`` as teacher-forcing tensors of their corrupted versions."""
        tok = self.tokenizer
        pairs = [
            span_corrupt(row, self.sentinels, generator, noise_density=self.noise_density,
                         mean_span=MEAN_SPAN)
            for row in blocks.tolist()
        ]  # fmt: skip
        return collate_translation(pairs, tok.pad_id, tok.bos_id, tok.eos_id)

    def next_batch(self) -> tuple[TranslationBatch, bool]:
        world = self.context.dist.world_size
        blocks, _ = self.train_blocks.sample(self.batch_size * world, self.batch_rng)
        batch = self.corrupt(blocks, self.noise_rng)  # the global batch, then this rank's rows
        rows = torch.tensor(self.context.dist.shard(range(blocks.size(0))), dtype=torch.long)
        src, tgt_in, tgt_out = (t.index_select(0, rows) for t in (batch.src, batch.tgt_in,
                                                                 batch.tgt_out))  # fmt: skip
        mine = TranslationBatch(src, tgt_in, tgt_out, batch.pad_id)
        return mine.to(self.context.device), True

    def _sums(self, model: nn.Module, batch: TranslationBatch) -> tuple[LossSums, LossOutput]:
        with self.context.precision():
            output = model(batch.src, batch.tgt_in)
        out = label_smoothed_cross_entropy(output.logits, batch.tgt_out, epsilon=0.0,
                                           ignore_index=batch.pad_id, reduction="sum")  # fmt: skip
        moe = getattr(output, "moe", None)
        return with_moe_losses(out.loss, out.nll, int(out.n_tokens), moe, self.model_config), out

    def loss(self, model: nn.Module, batch: TranslationBatch) -> LossSums:
        return self._sums(model, batch)[0]

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> dict[str, float]:
        block, limit = self.block, self.cfg.eval_blocks
        valid = self.corpus.valid
        if num_tokens(valid) <= block:
            return {}  # shorter than one block
        ids = as_tensor(valid, limit * block + 1)
        blocks = LMBlocks(ids, block, name="validation split")
        generator = torch.Generator().manual_seed(self.cfg.seed)  # the same noise every time
        was_training = model.training
        model.eval()
        nll, tokens = 0.0, 0
        for x, _ in blocks.sequential(self.batch_size, max_blocks=limit):
            batch = self.corrupt(x, generator).to(self.context.device)
            _, out = self._sums(model, batch)
            nll += float(out.nll)
            tokens += int(out.n_tokens)
        model.train(was_training)
        return {"loss": nll / max(tokens, 1), "ppl": perplexity(nll, max(tokens, 1))}

    def progress(self) -> dict[str, object]:
        return {}

    def state_dict(self) -> dict[str, object]:
        return {"batch_rng": self.batch_rng.get_state(), "noise_rng": self.noise_rng.get_state()}

    def load_state_dict(self, state: dict[str, object]) -> None:
        self.batch_rng.set_state(saved_rng(state, "batch_rng"))
        self.noise_rng.set_state(saved_rng(state, "noise_rng"))
