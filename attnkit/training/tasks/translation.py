"""The translation task: an encoder-decoder (Transformer or RNN) on parallel text.

Data: the training pairs as token ids (``TokenPairs``: memory-mapped from a
prepared cache, ``data.loading: prepared``, or encoded in memory), pairs
longer than ``data.max_len`` dropped (and counted), then token-budget
batches of similar length (``TokenBudgetSampler``, §5.1), reshuffled every
epoch (``PairBatches``); or, with ``data.loading: streaming``, read and
encoded on the fly (``PairStream``). Objective: the
label-smoothed cross-entropy of §5.4 (``train.label_smoothing``), as sums over
target tokens, plus the routers' auxiliary losses of a mixture-of-experts
model (``with_moe_losses``). With ``train.fast`` in a single process the
Transformer takes the chunked loss, which never holds the whole batch's
``(N, V)`` logits.
Validation: loss and perplexity on every pair, greedy BLEU (and exact match)
on the first ``train.valid_bleu_sentences``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import ClassVar, cast

import numpy as np
import torch
from torch import Tensor, nn

from attnkit.data.collate import TranslationBatch
from attnkit.data.pair_batches import BatchStream, PairBatches, encode_pairs
from attnkit.data.token_store import ConcatPairs, TokenPairs
from attnkit.data.tokenizers import Tokenizer
from attnkit.errors import ConfigError, UsageError
from attnkit.evaluation.perplexity import perplexity, translation_sums
from attnkit.losses import (
    chunked_label_smoothed_cross_entropy,
    label_smoothed_cross_entropy,
)
from attnkit.models import RNNSeq2SeqConfig, Seq2SeqConfig, TransformerConfig
from attnkit.models.protocols import LinearLogits, Seq2SeqModel
from attnkit.training import distributed as dist_util
from attnkit.training.runconfig import RunConfig
from attnkit.training.tasks.base import (
    LossSums,
    Task,
    TaskContext,
    TaskInputs,
    build_task_model,
    check_vocab_fits,
    model_config_from_run,
    unknown_note,
    with_moe_losses,
)
from attnkit.training.tasks.corpus import translation_data
from attnkit.training.warm_start import WarmStart

Pair = tuple[str, str]
# The families the task trains (the first is the default).
SEQ2SEQ_CONFIGS: tuple[type[Seq2SeqConfig], ...] = (TransformerConfig, RNNSeq2SeqConfig)


def check_lengths_fit(
    config: Seq2SeqConfig, longest_src: int, longest_tgt: int, data_max_len: int
) -> None:
    """Refuse, before training, a model whose positions cannot hold the longest pair.

    Lengths count EOS on the source and BOS (or EOS) on the target, as the batches will.
    """
    limits = [("max_len", config.max_len, max(longest_src, longest_tgt))]
    if getattr(config, "attention", None) == "luong_location":  # a fixed source width
        limits.append(("max_src_len", config.max_src_len, longest_src))  # type: ignore[union-attr]
    for name, limit, longest in limits:
        if longest > limit:
            raise ConfigError(
                f"model.{name}: {limit} positions, but the longest training pair needs "
                f"{longest} (data.max_len={data_max_len}); raise model.{name} or lower "
                "data.max_len"
            )


class TranslationTask:
    """Label-smoothed cross-entropy on token-budget batches of sentence pairs."""

    name: ClassVar[str] = "translation"
    betas: ClassVar[tuple[float, float]] = (0.9, 0.98)  # §5.3
    eps: ClassVar[float] = 1e-9

    @classmethod
    def from_run(cls, given: TaskInputs) -> Task:
        """Parallel text (``tasks/corpus.py``: prepared or reused as ``data.loading`` says)."""
        data = translation_data(given.run, given.tokenizer, log=given.log)
        return cls(given.run, **data, start=given.start)

    def __init__(
        self,
        run: RunConfig,
        tokenizer: Tokenizer,
        train_pairs: Sequence[Pair] | TokenPairs | BatchStream,
        valid_pairs: Sequence[Pair] | None = None,
        *,
        dropped_empty: int = 0,
        start: WarmStart | None = None,
    ) -> None:
        """``train_pairs``: text pairs (encoded here, in memory), their token ids
        (``TokenPairs``, e.g. memory-mapped from a prepared cache), batches of
        several weighted corpora (``PairBatches``) or a stream (``PairStream``)."""
        self.run, self.cfg, self.tokenizer = run, run.train, tokenizer
        self.dropped_empty = dropped_empty  # pairs with an empty side the reader skipped
        self.valid_pairs = list(valid_pairs or [])
        self.start = start  # --init: the checkpoint whose weights the model starts from
        self.model_config: Seq2SeqConfig = model_config_from_run(
            run,
            families=SEQ2SEQ_CONFIGS,
            defaults={
                "src_vocab_size": tokenizer.vocab_size,
                "tgt_vocab_size": tokenizer.vocab_size,
                "pad_id": tokenizer.pad_id,
                "bos_id": tokenizer.bos_id,
                "eos_id": tokenizer.eos_id,
            },
            start=start,
        )
        check_vocab_fits(self.model_config, ("src_vocab_size", "tgt_vocab_size"), tokenizer)
        max_len = run.data.max_len
        batches = train_pairs if isinstance(train_pairs, PairBatches) else None
        if isinstance(train_pairs, TokenPairs | Sequence):
            pairs = train_pairs
            if not isinstance(pairs, TokenPairs):
                pairs = encode_pairs(pairs, tokenizer)
            batches = PairBatches(pairs, max_len=max_len, seed=self.cfg.seed)
        if batches is not None:
            if not batches.num_kept:
                raise UsageError(
                    f"data.max_len: all {len(batches.pairs)} training pairs are longer than "
                    f"{max_len} tokens; raise data.max_len"
                )
            check_lengths_fit(self.model_config, batches.longest_src, batches.longest_tgt, max_len)
            self.data: BatchStream = batches
        else:  # a stream: pairs are checked as they come, within data.max_len
            check_lengths_fit(self.model_config, max_len, max_len, max_len)
            self.data = train_pairs  # type: ignore[assignment]
        self.context = TaskContext()
        self.chunked = False
        self._logits_weight: Callable[[], Tensor] | None = None
        self._stream: Iterator[tuple[TranslationBatch, bool]] | None = None

    def setup(self, context: TaskContext) -> None:
        self.context = context
        # train.max_tokens is per rank: the global batch (cut identically on every
        # rank, then shared out) holds max_tokens x world_size padded tokens.
        self.data.set_max_tokens(self.cfg.max_tokens * context.dist.world_size)
        # The chunked loss reads the output projection outside the wrapped
        # forward, which FSDP2 does not allow: single process only.
        self.chunked = context.fast and not context.dist.enabled

    def build_model(self) -> nn.Module:
        model = build_task_model(self.model_config, self.start, freeze=self.cfg.freeze)
        # The chunked loss projects the decoder's hidden states itself: only for a model
        # whose logits are that projection and nothing more (not the RNN's).
        self._logits_weight = model.logits_weight if isinstance(model, LinearLogits) else None
        return model

    def describe(self) -> str:
        empty = (
            f", {self.dropped_empty} with an empty side skipped (data.skip_empty)"
            if self.dropped_empty
            else ""
        )
        unknown = ""
        if self.start is not None and isinstance(self.data, PairBatches):
            # A tokenizer that came with the checkpoint may not know this data.
            pairs = self.data.pairs
            parts = pairs.parts if isinstance(pairs, ConcatPairs) else [pairs]
            unknown = unknown_note(self.tokenizer, {
                "source": np.concatenate([np.asarray(p.src.ids) for p in parts]),
                "target": np.concatenate([np.asarray(p.tgt.ids) for p in parts]),
            })  # fmt: skip
        warm = ""
        if self.start is not None and self.start.source.family == "encoder_only":
            warm = (  # attnkit.training.warm_start_seq2seq
                "; warm-started from the encoder: its layers in the encoder and the decoder, "
                "the cross-attention new"
            )
        return (
            f"{self.data.describe()}{empty}), vocabulary {self.tokenizer.vocab_size}{unknown}{warm}"
        )

    # -- batches -------------------------------------------------------------------

    def _batches(self) -> Iterator[tuple[TranslationBatch, bool]]:
        """Endless stream of ``(batch, real)``, resuming mid-epoch where the state says."""
        tok, dist = self.tokenizer, self.context.dist
        for pairs, rows in self.data:
            mine = dist.shard(rows.tolist())
            batch = pairs.batch(
                mine or rows[:1], pad_id=tok.pad_id, bos_id=tok.bos_id, eos_id=tok.eos_id
            )
            yield batch.to(self.context.device, non_blocking=True), bool(mine)

    def next_batch(self) -> tuple[TranslationBatch, bool]:
        if self._stream is None:
            self._stream = self._batches()
        return next(self._stream)

    # -- objective -----------------------------------------------------------------

    def loss(self, model: nn.Module, batch: TranslationBatch) -> LossSums:
        pad = self.tokenizer.pad_id
        logits_weight = self._logits_weight if self.chunked else None
        with self.context.precision():
            if logits_weight is not None:
                output = model(batch.src, batch.tgt_in, compute_logits=False)
                out = chunked_label_smoothed_cross_entropy(
                    output.hidden, logits_weight(), batch.tgt_out,
                    epsilon=self.cfg.label_smoothing,
                    ignore_index=pad, reduction="sum",
                )  # fmt: skip
            else:
                output = model(batch.src, batch.tgt_in)
        if logits_weight is None:  # scored outside autocast, as before
            out = label_smoothed_cross_entropy(
                output.logits, batch.tgt_out, epsilon=self.cfg.label_smoothing,
                ignore_index=pad, reduction="sum",
            )  # fmt: skip
        # An RNN's output has no mixture-of-experts report.
        moe = getattr(output, "moe", None)
        return with_moe_losses(out.loss, out.nll, int(out.n_tokens), moe, self.model_config)

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> dict[str, float]:
        """Validation loss and perplexity on all pairs, BLEU on the first N (greedy).

        Under torchrun every rank computes the same numbers (FSDP needs all
        ranks in each forward); rank 0 logs them.
        """
        if not self.valid_pairs:
            return {}
        model.eval()
        tok = self.tokenizer
        seq2seq = cast(Seq2SeqModel, model)  # the model build_model made (the trainer's)
        loss_sum, nll_sum, n_tokens = translation_sums(
            seq2seq,
            tok,
            self.valid_pairs,
            label_smoothing=self.cfg.label_smoothing,
            max_len=self.run.data.max_len,
        )
        metrics = {
            "loss": loss_sum / max(n_tokens, 1),
            "ppl": perplexity(nll_sum, max(n_tokens, 1)),
        }
        n_bleu = min(self.cfg.valid_bleu_sentences, len(self.valid_pairs))
        if n_bleu:
            from attnkit.evaluation.bleu import corpus_scores
            from attnkit.inference import translate_texts

            pairs = self.valid_pairs[:n_bleu]
            with dist_util.gathered_parameters(model):  # FSDP: decoding needs them all
                hyps = translate_texts(
                    model, tok, [s for s, _ in pairs], beam=1, device=self.context.device
                )
            scores = corpus_scores(
                hyps, [t for _, t in pairs], tokenize=self.run.decode.bleu_tokenize
            )
            metrics["bleu"] = float(scores["bleu"])
            metrics["exact_match"] = sum(h == t for h, (_, t) in zip(hyps, pairs)) / n_bleu
        return metrics

    # -- resume --------------------------------------------------------------------

    def progress(self) -> dict[str, object]:
        return self.data.progress()

    def state_dict(self) -> dict[str, object]:
        return self.data.state_dict()

    def load_state_dict(self, state: dict[str, object]) -> None:
        self.data.load_state_dict(state)
        self._stream = None  # restart the stream where the state says
