"""Sentence embeddings fine-tuned on sentence pairs (Reimers and Gurevych, 2019, "Sentence-BERT").

Data: ``{data.dir}/{data.train}`` and ``{data.dir}/{data.valid}`` (null: no
validation), pairs with a similarity score or without
(``attnkit.data.scored_pairs``). Each sentence is encoded alone as
``[CLS] sentence [SEP]``, cut to ``data.max_len`` tokens (counted), and becomes one
vector: the encoder's last hidden states pooled over its tokens (``model.pooling``:
``mean`` over real tokens, as sentence-transformers' MiniLM, or ``first``: [CLS]).

Objective, chosen by the data:

* **scored pairs**, ``train.similarity_loss: cosine`` (the default): Sentence-BERT's
  regression (its ``CosineSimilarityLoss``): the squared difference between
  ``cos(u, v)`` and the gold score scaled into [0, 1] (divided by the training file's
  largest score when that is above 1: STS-B's 0-5 becomes 0-1), summed over the pairs;
  ``cosent``: CoSENT (Su, 2022; sentence-transformers' ``CoSENTLoss``), which only asks
  that the cosines be ordered as the gold scores are: ``log(1 + sum over pairs (i, j)
  with score_i < score_j of exp(20 (cos_i - cos_j)))`` over a batch (Spearman
  correlation, the benchmark's figure, only reads the order too);
* **pairs without scores** (paraphrases, question and answer): in-batch negatives
  (sentence-transformers' ``MultipleNegativesRankingLoss``, Henderson et al., 2017):
  every other pair's second sentence is a negative for a pair's first, cross-entropy
  over ``20 * cos`` (the scale sentence-transformers uses), summed.

The model is an encoder-only model with no head (``num_labels = 0``), usually an
imported sentence-transformers model (``attnkit train --init``); its checkpoints are
read by ``attnkit embed`` and ``attnkit serve`` (``/v1/embeddings``). Batches:
``train.batch_size`` pairs, grouped by length with ``train.group_by_length``; an
epoch's order is seeded and saved for a bit-exact resume. Validation: the Spearman
and Pearson correlations of cosine similarity with the gold scores
(``attnkit.evaluation.embeddings.similarity_scores``), or, without scores, the
in-batch loss.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnkit.data.classification import collate_examples, encode_example, length_grouped_order
from attnkit.data.mlm import encoder_vocab_fields
from attnkit.data.scored_pairs import ScoredPairs, read_scored_pairs
from attnkit.data.tokenizers import Tokenizer
from attnkit.errors import ConfigError
from attnkit.evaluation.embeddings import embed_texts, pool_tokens, similarity_scores
from attnkit.models.lm_config import EncoderOnlyConfig
from attnkit.training.runconfig import RunConfig
from attnkit.training.tasks.base import (
    LossSums,
    Task,
    TaskContext,
    TaskInputs,
    build_task_model,
    model_config_from_run,
    saved_int,
    saved_rng,
)
from attnkit.training.warm_start import WarmStart

HEAD_FIELDS = ("num_labels", "label_names")
SCALE = 20.0  # in-batch negatives and CoSENT: cosine similarities times this are the logits


def cosent_loss(cosine: Tensor, gold: Tensor, scale: float = SCALE) -> Tensor:
    """CoSENT over one batch: ``cosine`` and ``gold`` ``(B,)``; a scalar.

    ``log(1 + sum_{gold_i < gold_j} exp(scale * (cos_i - cos_j)))``: zero when every
    pair's cosine is ordered as its gold score, and a pair of equal gold scores asks
    for nothing."""
    diff = scale * (cosine[:, None] - cosine[None, :])  # (B, B): cos_i - cos_j
    wrong_order = gold[:, None] < gold[None, :]
    terms = diff.masked_fill(~wrong_order, float("-inf")).flatten()
    return torch.logsumexp(torch.cat([terms.new_zeros(1), terms]), dim=0)


def _read(run: RunConfig, split: str) -> ScoredPairs | None:
    name = run.data.one_file(split, run.task)
    if name is None:
        return None
    path = Path(run.data.dir) / name
    if not path.is_file():
        raise ConfigError(f"data.{split}: {path} is not a file (TSV or JSONL sentence pairs)")
    return read_scored_pairs(path)


def _encode(tokenizer: Tokenizer, texts: list[str], max_len: int) -> tuple[list[list[int]], int]:
    ids, cut = [], 0
    for pieces in tokenizer.encode_batch(texts):
        seq, _, was_cut = encode_example(pieces, None, bos_id=tokenizer.bos_id,
                                         eos_id=tokenizer.eos_id, max_len=max_len)  # fmt: skip
        ids.append(seq)
        cut += was_cut
    return ids, cut


@dataclass
class PairBatch:
    """Both sides of ``B`` pairs in one padded tensor: rows ``0..B-1`` are the first
    sentences, ``B..2B-1`` the second ones; ``ids`` ``(2B, S)``, ``lengths`` ``(2B,)``,
    ``scores`` ``(B,)`` in [0, 1] or ``None``."""

    ids: Tensor
    lengths: Tensor
    scores: Tensor | None

    def to(self, device: torch.device) -> PairBatch:
        scores = self.scores.to(device) if self.scores is not None else None
        return PairBatch(self.ids.to(device), self.lengths.to(device), scores)


def pair_batch(
    first: list[list[int]], second: list[list[int]], scores: list[float] | None, pad_id: int
) -> PairBatch:
    """One padded batch of both sides of the pairs (see ``PairBatch``)."""
    seqs = first + second
    ids = collate_examples(seqs, None, None, pad_id).ids
    values = torch.tensor(scores) if scores is not None else None
    return PairBatch(ids, torch.tensor([len(x) for x in seqs]), values)


class SentenceSimilarityTask:
    """Cosine-similarity regression (or in-batch negatives) of an encoder's pooled vectors."""

    name: ClassVar[str] = "sentence_similarity"
    betas: ClassVar[tuple[float, float]] = (0.9, 0.999)
    eps: ClassVar[float] = 1e-8

    @classmethod
    def from_run(cls, given: TaskInputs) -> Task:
        train = _read(given.run, "train")
        assert train is not None  # data.train is never null
        tokenizer = given.tokenizer
        if tokenizer is None:  # from scratch: a vocabulary of the training sentences
            from attnkit.data.tokenizers import BPETokenizer, CharTokenizer

            texts = train.first + train.second
            cfg = given.run.tokenizer
            tokenizer = (CharTokenizer.train(texts) if cfg.kind == "char"
                         else BPETokenizer.train(texts, vocab_size=cfg.vocab_size))  # fmt: skip
        return cls(given.run, tokenizer, train, _read(given.run, "valid"), start=given.start)

    def __init__(
        self,
        run: RunConfig,
        tokenizer: Tokenizer,
        train: ScoredPairs,
        valid: ScoredPairs | None = None,
        *,
        start: WarmStart | None = None,
    ) -> None:
        self.run, self.cfg, self.tokenizer = run, run.train, tokenizer
        self.train_data, self.valid_data = train, valid
        defaults: dict[str, object] = {"num_labels": 0, "label_names": ()}
        if start is None:
            defaults.update(encoder_vocab_fields(tokenizer))
            defaults.update(pooling="mean")
        self.model_config: EncoderOnlyConfig = model_config_from_run(
            run, families=(EncoderOnlyConfig,), defaults=defaults, start=start,
            head_fields=HEAD_FIELDS,
        )  # fmt: skip
        self.start = start
        max_len = run.data.max_len
        if max_len > self.model_config.max_len:
            positions = self.model_config.max_len
            raise ConfigError(f"data.max_len: {max_len} tokens, but the model has {positions} "
                              "positions; lower data.max_len")  # fmt: skip
        self.pooling = "cls" if self.model_config.pooling == "first" else "mean"
        self.first, cut_a = _encode(tokenizer, train.first, max_len)
        self.second, cut_b = _encode(tokenizer, train.second, max_len)
        self.truncated = cut_a + cut_b
        self.scores: list[float] | None = None
        if train.scores is not None:
            top = max(train.scores)
            self.score_scale = top if top > 1.0 else 1.0
            self.scores = [s / self.score_scale for s in train.scores]
        if valid is not None and (valid.scores is None) != (train.scores is None):
            raise ConfigError(f"data.valid: {valid.source} and {train.source} differ: one "
                              "has similarity scores, the other not")  # fmt: skip
        self.batch_size = self.cfg.batch_size
        if self.scores is None and self.batch_size < 2:
            raise ConfigError(
                "train.batch_size: pairs without scores train against the other pairs of a "
                "batch (in-batch negatives); use at least 2"
            )
        self.context = TaskContext()
        self.order_rng = torch.Generator().manual_seed(self.cfg.seed)
        self.epoch = 0
        self.batch_in_epoch = 0
        self._draw_order()

    @property
    def lengths(self) -> list[int]:
        return [max(len(a), len(b)) for a, b in zip(self.first, self.second)]

    def _draw_order(self) -> None:
        self._epoch_rng_state = self.order_rng.get_state()
        size = self.batch_size * self.context.dist.world_size
        self.order = length_grouped_order(self.lengths, size, self.order_rng,
                                          group=self.cfg.group_by_length)  # fmt: skip

    def setup(self, context: TaskContext) -> None:
        world = self.context.dist.world_size
        self.context = context
        if context.dist.world_size != world:
            self.order_rng.set_state(self._epoch_rng_state)
            self._draw_order()

    def build_model(self) -> nn.Module:
        return build_task_model(self.model_config, self.start, freeze=self.cfg.freeze)

    def describe(self) -> str:
        kind = ("similarity scores (cosine regression)" if self.scores is not None
                else "no scores (in-batch negatives)")  # fmt: skip
        held = f", {len(self.valid_data)} for validation" if self.valid_data else ""
        cut = f" ({self.truncated} sentences cut to data.max_len)" if self.truncated else ""
        return (f"{len(self.train_data)} training sentence pairs with {kind}{cut}{held}, "
                f"{self.pooling} pooling, {self.batch_size} pairs per batch, vocabulary "
                f"{self.tokenizer.vocab_size}")  # fmt: skip

    # -- batches -------------------------------------------------------------------

    def _collate(self, rows: list[int]) -> PairBatch:
        scores = [self.scores[i] for i in rows] if self.scores is not None else None
        return pair_batch([self.first[i] for i in rows], [self.second[i] for i in rows],
                          scores, self.tokenizer.pad_id)  # fmt: skip

    def next_batch(self) -> tuple[PairBatch, bool]:
        if self.batch_in_epoch >= len(self.order):
            self.epoch += 1
            self.batch_in_epoch = 0
            self._draw_order()
        index = self.order[self.batch_in_epoch]
        self.batch_in_epoch += 1
        rows = self.context.dist.shard(range(len(index)))
        keep = [index[i] for i in rows] or index[:1]
        return self._collate(keep).to(self.context.device), bool(rows)

    # -- objective -----------------------------------------------------------------

    def vectors(self, model: nn.Module, batch: PairBatch) -> tuple[Tensor, Tensor]:
        """The pooled vectors ``(B, D)`` of the first and of the second sentences."""
        real = (
            torch.arange(batch.ids.size(1), device=batch.ids.device)[None] < batch.lengths[:, None]
        )
        with self.context.precision():
            hidden = model(batch.ids, mlm=False, classify=False).hidden
        pooled = pool_tokens(hidden.float(), real, self.pooling)
        half = pooled.size(0) // 2
        return pooled[:half], pooled[half:]

    def loss(self, model: nn.Module, batch: PairBatch) -> LossSums:
        u, v = self.vectors(model, batch)
        if batch.scores is not None:
            cosine = F.cosine_similarity(u, v, dim=-1)
            loss = self._scored_loss(cosine, batch.scores.float()) * u.size(0)
            return LossSums(loss, loss.detach(), int(u.size(0)))
        logits = SCALE * F.normalize(u, dim=-1) @ F.normalize(v, dim=-1).T
        targets = torch.arange(u.size(0), device=u.device)
        loss = F.cross_entropy(logits, targets, reduction="sum")
        accuracy = (logits.detach().argmax(-1) == targets).float().mean()
        return LossSums(loss, loss.detach(), int(u.size(0)), {"accuracy": float(accuracy)})

    def _scored_loss(self, cosine: Tensor, gold: Tensor) -> Tensor:
        """The objective on scored pairs, a mean over the ``B`` pairs (``cosine``, ``gold``:
        ``(B,)``; CoSENT's batch loss counts as each pair's)."""
        if self.cfg.similarity_loss == "cosent":
            return cosent_loss(cosine, gold)
        return F.mse_loss(cosine, gold)

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> dict[str, float]:
        """Spearman and Pearson correlations on the validation pairs and the objective's
        mean there (pairs without scores: the in-batch loss alone)."""
        valid = self.valid_data
        if valid is None:
            return {}
        if valid.scores is None:
            was = model.training
            model.eval()
            total, count = 0.0, 0
            max_len = self.run.data.max_len
            for start in range(0, len(valid), 64):
                a, _ = _encode(self.tokenizer, valid.first[start : start + 64], max_len)
                b, _ = _encode(self.tokenizer, valid.second[start : start + 64], max_len)
                batch = pair_batch(a, b, None, self.tokenizer.pad_id)
                sums = self.loss(model, batch.to(self.context.device))
                total, count = total + float(sums.loss), count + sums.tokens
            model.train(was)
            return {"loss": total / max(count, 1)}
        max_len = self.run.data.max_len
        u = embed_texts(model, self.tokenizer, valid.first, pooling=self.pooling,
                        max_len=max_len, batch_size=64).vectors  # fmt: skip
        v = embed_texts(model, self.tokenizer, valid.second, pooling=self.pooling,
                        max_len=max_len, batch_size=64).vectors  # fmt: skip
        scores = similarity_scores(u, v, valid.scores)
        # the objective on the validation pairs too (the loss curve plots it)
        gold = torch.tensor(valid.scores) / getattr(self, "score_scale", 1.0)
        cosine = F.cosine_similarity(u, v, dim=-1)
        return {**scores, "loss": float(self._scored_loss(cosine, gold.float()))}

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
        self._draw_order()
