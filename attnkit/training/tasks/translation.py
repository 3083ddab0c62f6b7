"""The translation task: an encoder-decoder (Transformer or RNN) on parallel text.

Data: sentence pairs tokenized once, pairs longer than ``data.max_len``
dropped (and counted), then token-budget batches of similar length
(``TokenBudgetSampler``, §5.1), reshuffled every epoch. Objective: the
label-smoothed cross-entropy of §5.4 (``train.label_smoothing``), as sums over
target tokens, plus the routers' auxiliary losses of a mixture-of-experts
model (``with_moe_losses``). With ``train.fast`` in a single process the
Transformer takes the chunked loss, which never holds the whole batch's
``(N, V)`` logits.
Validation: loss and perplexity on every pair, greedy BLEU (and exact match)
on the first ``train.valid_bleu_sentences``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from attnkit.data.batching import TokenBudgetSampler, filter_by_length
from attnkit.data.collate import TranslationBatch, collate_translation
from attnkit.data.readers import ParallelCorpus, read_parallel, read_tsv
from attnkit.data.tokenizers import Tokenizer
from attnkit.errors import ConfigError, UsageError
from attnkit.evaluation.perplexity import perplexity, translation_sums
from attnkit.losses import (
    chunked_label_smoothed_cross_entropy,
    label_smoothed_cross_entropy,
)
from attnkit.models import EncoderDecoder, Seq2SeqConfig
from attnkit.training import distributed as dist_util
from attnkit.training.init import Initial
from attnkit.training.runconfig import DataConfig, RunConfig, TokenizerConfig
from attnkit.training.tasks.base import (
    LossSums,
    TaskContext,
    build_task_model,
    check_vocab_fits,
    model_config_from_run,
    unknown_note,
    with_moe_losses,
)

Pair = tuple[str, str]


def load_parallel(data: DataConfig, split: str) -> ParallelCorpus:
    """Pairs of one split, from ``{dir}/{split}.{lang}`` files or a TSV file."""
    files = data.files(split)
    if len(files) == 1:
        return read_tsv(files[0], skip_empty=data.skip_empty)
    return read_parallel(*files, skip_empty=data.skip_empty)


def build_tokenizer(cfg: TokenizerConfig, pairs: Sequence[Pair]) -> Tokenizer:
    """Train the configured tokenizer jointly on both sides of ``pairs``."""
    from attnkit.data.tokenizers import BPETokenizer, CharTokenizer

    texts = [s for s, _ in pairs] + [t for _, t in pairs]
    if cfg.kind == "char":
        return CharTokenizer.train(texts)
    return BPETokenizer.train(texts, vocab_size=cfg.vocab_size)


@dataclass
class EncodedCorpus:
    """Token ids of the kept training pairs (no BOS/EOS yet)."""

    src: list[list[int]]
    tgt: list[list[int]]
    dropped: int  # pairs longer than data.max_len


def encode_corpus(pairs: Sequence[Pair], tokenizer: Tokenizer, max_len: int) -> EncodedCorpus:
    src = [tokenizer.encode(s) for s, _ in pairs]
    tgt = [tokenizer.encode(t) for _, t in pairs]
    # +1 for EOS on the source and BOS/EOS on the target.
    kept, dropped = filter_by_length(
        [len(s) + 1 for s in src], [len(t) + 1 for t in tgt], max_len=max_len
    )
    return EncodedCorpus([src[i] for i in kept], [tgt[i] for i in kept], dropped)


def check_lengths_fit(config: Seq2SeqConfig, corpus: EncodedCorpus, data_max_len: int) -> None:
    """Refuse, before training, a model whose positions cannot hold the longest pair.

    Counts EOS on the source and BOS (or EOS) on the target, as the batches will.
    """
    longest_src = max((len(s) + 1 for s in corpus.src), default=0)
    longest_tgt = max((len(t) + 1 for t in corpus.tgt), default=0)
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

    def __init__(
        self,
        run: RunConfig,
        tokenizer: Tokenizer,
        train_pairs: Sequence[Pair],
        valid_pairs: Sequence[Pair] | None = None,
        *,
        dropped_empty: int = 0,
        initial: Initial | None = None,
    ) -> None:
        self.run, self.cfg, self.tokenizer = run, run.train, tokenizer
        self.dropped_empty = dropped_empty  # pairs with an empty side the reader skipped
        self.valid_pairs = list(valid_pairs or [])
        self.initial = initial  # --init: the checkpoint whose weights the model starts from
        self.model_config: Seq2SeqConfig = model_config_from_run(
            run,
            families=("transformer", "rnn"),
            defaults={
                "src_vocab_size": tokenizer.vocab_size,
                "tgt_vocab_size": tokenizer.vocab_size,
                "pad_id": tokenizer.pad_id,
                "bos_id": tokenizer.bos_id,
                "eos_id": tokenizer.eos_id,
            },
            initial=initial,
        )
        check_vocab_fits(self.model_config, ("src_vocab_size", "tgt_vocab_size"), tokenizer)
        self.corpus = encode_corpus(train_pairs, tokenizer, run.data.max_len)
        if not self.corpus.src:
            raise UsageError(
                f"data.max_len: all {len(train_pairs)} training pairs are longer than "
                f"{run.data.max_len} tokens; raise data.max_len"
            )
        check_lengths_fit(self.model_config, self.corpus, run.data.max_len)
        self.context = TaskContext()
        self.chunked = False
        self._output_proj: nn.Linear | None = None
        self.epoch = 0
        self.batch_in_epoch = 0  # batches of this epoch already consumed (for resume)
        self._stream: Iterator[tuple[TranslationBatch, bool]] | None = None

    def setup(self, context: TaskContext) -> None:
        self.context = context
        # train.max_tokens is per rank: the global batch (cut identically on every
        # rank, then shared out) holds max_tokens x world_size padded tokens.
        self.sampler = TokenBudgetSampler(
            [len(s) + 1 for s in self.corpus.src],
            [len(t) + 1 for t in self.corpus.tgt],
            max_tokens=self.cfg.max_tokens * context.dist.world_size,
            seed=self.cfg.seed,
        )
        # The chunked loss reads the output projection outside the wrapped
        # forward, which FSDP2 does not allow: single process only.
        self.chunked = context.fast and not context.dist.enabled

    def build_model(self) -> nn.Module:
        model = build_task_model(self.model_config, self.initial, freeze=self.cfg.freeze)
        # The chunked loss projects the decoder's hidden states itself (RNNs add dropout first).
        self._output_proj = model.output_proj if isinstance(model, EncoderDecoder) else None
        return model

    def describe(self) -> str:
        empty = (
            f", {self.dropped_empty} with an empty side skipped (data.skip_empty)"
            if self.dropped_empty
            else ""
        )
        unknown = unknown_note(self.tokenizer, {"source": self.corpus.src,
                                                "target": self.corpus.tgt})  # fmt: skip
        return (
            f"{len(self.corpus.src) + self.corpus.dropped} training pairs "
            f"({self.corpus.dropped} longer than data.max_len={self.run.data.max_len} "
            f"dropped{empty}), vocabulary {self.tokenizer.vocab_size}{unknown}"
        )

    # -- batches -------------------------------------------------------------------

    def _batches(self) -> Iterator[tuple[TranslationBatch, bool]]:
        """Endless stream of ``(batch, real)``, resuming mid-epoch where the state says."""
        tok, dist = self.tokenizer, self.context.dist
        while True:
            self.sampler.set_epoch(self.epoch)
            batches = list(self.sampler)
            for i in range(self.batch_in_epoch, len(batches)):
                self.batch_in_epoch = i + 1
                idx = dist.shard(batches[i])
                batch = collate_translation(
                    [(self.corpus.src[j], self.corpus.tgt[j]) for j in idx or batches[i][:1]],
                    tok.pad_id,
                    tok.bos_id,
                    tok.eos_id,
                )
                yield batch.to(self.context.device, non_blocking=True), bool(idx)
            self.epoch += 1
            self.batch_in_epoch = 0

    def next_batch(self) -> tuple[TranslationBatch, bool]:
        if self._stream is None:
            self._stream = self._batches()
        return next(self._stream)

    # -- objective -----------------------------------------------------------------

    def loss(self, model: nn.Module, batch: TranslationBatch) -> LossSums:
        pad = self.tokenizer.pad_id
        chunked = self.chunked and self._output_proj is not None
        with self.context.precision():
            if chunked:
                output = model(batch.src, batch.tgt_in, compute_logits=False)
                out = chunked_label_smoothed_cross_entropy(
                    output.hidden, self._output_proj.weight, batch.tgt_out,  # type: ignore[union-attr]
                    epsilon=self.cfg.label_smoothing,
                    ignore_index=pad, reduction="sum",
                )  # fmt: skip
            else:
                output = model(batch.src, batch.tgt_in)
        if not chunked:  # scored outside autocast, as before
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
        loss_sum, nll_sum, n_tokens = translation_sums(
            model,
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
            from attnkit.decoding.text import translate_texts
            from attnkit.evaluation.bleu import corpus_scores

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

    def progress(self) -> dict[str, Any]:
        return {"epoch": self.epoch}

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "batch_in_epoch": self.batch_in_epoch}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch = int(state["epoch"])
        self.batch_in_epoch = int(state["batch_in_epoch"])
        self._stream = None  # restart the stream where the state says
