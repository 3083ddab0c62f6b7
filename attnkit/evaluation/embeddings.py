"""Sentence embeddings from an encoder-only model, and how well they rank similarity.

``embed_texts`` turns texts into vectors the way sentence-transformers does
(Reimers and Gurevych, 2019, "Sentence-BERT"): ``[CLS] text [SEP]`` cut to
``max_len`` tokens, the encoder's last hidden states pooled over the real
tokens (``mean``, ``cls``: the first token, or ``max``), then L2-normalised
(cosine similarity becomes a dot product). Batches are length-sorted (the least
padding) and the vectors come back in input order. ``similarity_scores`` gives
the Pearson and Spearman correlations between cosine similarities and gold
scores, as STS benchmarks report them (``scipy.stats``).

Shapes: ``N`` texts, ``B`` batch, ``S`` length, ``D`` model width.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnkit.data.classification import collate_examples, encode_example, sorted_batches
from attnkit.data.tokenizers import Tokenizer

EmbeddingPooling = Literal["mean", "cls", "max"]
POOLINGS: tuple[str, ...] = ("mean", "cls", "max")


def pool_tokens(hidden: Tensor, real: Tensor, how: str) -> Tensor:
    """``hidden`` ``(B, S, D)`` -> ``(B, D)`` over the tokens ``real`` ``(B, S)`` marks."""
    if how == "cls":
        return hidden[:, 0]
    if how == "max":  # padding must never win the max
        return hidden.masked_fill(~real[:, :, None], torch.finfo(hidden.dtype).min).amax(1)
    if how != "mean":
        raise ValueError(f"pooling: expected one of {', '.join(POOLINGS)}, got {how!r}")
    weights = real.to(hidden.dtype)[:, :, None]
    return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1.0)


@dataclass(frozen=True)
class Embedded:
    """``vectors`` ``(N, D)`` float32 in input order; ``truncated`` texts were cut."""

    vectors: Tensor
    truncated: int


@torch.inference_mode()
def embed_texts(
    model: nn.Module,
    tokenizer: Tokenizer,
    texts: Sequence[str],
    *,
    pooling: str = "mean",
    normalize: bool = True,
    max_len: int = 256,
    batch_size: int = 32,
) -> Embedded:
    """One vector per text (see the module doc). ``model`` is an ``EncoderOnlyModel``."""
    if not texts:
        width = int(getattr(getattr(model, "config", None), "d_model", 0))
        return Embedded(torch.zeros(0, width), 0)
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    ids: list[list[int]] = []
    truncated = 0
    for pieces in tokenizer.encode_batch(list(texts)):
        seq, _, cut = encode_example(pieces, None, bos_id=tokenizer.bos_id,
                                     eos_id=tokenizer.eos_id, max_len=max_len)  # fmt: skip
        ids.append(seq)
        truncated += cut
    out: Tensor | None = None
    for rows in sorted_batches([len(x) for x in ids], batch_size):
        batch = collate_examples([ids[i] for i in rows], None, None, tokenizer.pad_id)
        tokens = batch.ids.to(device)
        lengths = torch.tensor([len(ids[i]) for i in rows], device=device)
        real = torch.arange(tokens.size(1), device=device)[None, :] < lengths[:, None]
        hidden = model(tokens, mlm=False, classify=False).hidden
        vectors = pool_tokens(hidden, real, pooling).float()
        if normalize:
            vectors = F.normalize(vectors, dim=-1)
        if out is None:
            out = torch.empty(len(ids), vectors.size(-1))
        out[torch.tensor(rows)] = vectors.cpu()
    model.train(was_training)
    assert out is not None
    return Embedded(out, truncated)


def similarity_scores(a: Tensor, b: Tensor, gold: Sequence[float]) -> dict[str, float]:
    """``pearson`` and ``spearman`` (x100 not applied) of cos(a_i, b_i) against ``gold``."""
    from scipy.stats import pearsonr, spearmanr

    cosine = F.cosine_similarity(a.float(), b.float(), dim=-1).tolist()
    return {
        "pearson": float(pearsonr(cosine, list(gold)).statistic),
        "spearman": float(spearmanr(cosine, list(gold)).statistic),
    }
