"""Perplexity, and the summed negative log-likelihoods it is computed from.

One place for every family: the trainer's tasks (their losses and
validation) and ``attnkit evaluate`` use these functions.

* ``translation_sums``: teacher-forced label-smoothed loss and NLL of sentence
  pairs under an encoder-decoder (EOS scored, padding not);
* ``causal_lm_nll``: next-token NLL of blocks under a decoder-only LM;
* ``masked_lm_nll``: NLL of the selected (masked) tokens under an encoder-only model;
* ``block_nll``: one of the two LM objectives over a token stream cut into
  non-overlapping blocks (MLM masks drawn from a fixed seed, so the same
  weights always give the same number);
* ``perplexity``: ``exp(total NLL / tokens)``, ``inf`` instead of an overflow.

Shapes: ``B`` batch, ``T`` block length, ``V`` vocabulary, ``N`` tokens.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnkit.data.collate import collate_translation
from attnkit.errors import UsageError
from attnkit.losses import label_smoothed_cross_entropy

# math.exp raises OverflowError above ~709.78; a diverged model should read as inf.
_MAX_EXP = math.log(sys.float_info.max)
IGNORE_INDEX = -100  # labels of unselected positions (F.cross_entropy's default)


def perplexity(total_nll: float, total_tokens: int) -> float:
    """``exp(total_nll / total_tokens)`` (natural log); ``inf`` instead of an overflow error."""
    if total_tokens <= 0:
        raise UsageError(f"total_tokens must be > 0, got {total_tokens}")
    mean = float(total_nll) / float(total_tokens)
    return math.inf if mean > _MAX_EXP else math.exp(mean)


def _at_least_fp32(logits: Tensor) -> Tensor:
    """Half-precision logits are scored in fp32; fp64 stays fp64."""
    return logits.to(torch.promote_types(logits.dtype, torch.float32))


def causal_lm_forward(model: nn.Module, x: Tensor, y: Tensor) -> tuple[Tensor, int, Any]:
    """``causal_lm_nll`` and the model's output (its ``moe`` report, for training)."""
    out = model(x)
    logits = out.logits
    nll = F.cross_entropy(_at_least_fp32(logits.flatten(0, 1)), y.flatten(), reduction="sum")
    return nll, y.numel(), out


def causal_lm_nll(model: nn.Module, x: Tensor, y: Tensor) -> tuple[Tensor, int]:
    """Summed next-token NLL of ``model`` reading ``x`` ``(B, T)`` against ``y`` ``(B, T)``."""
    nll, count, _ = causal_lm_forward(model, x, y)
    return nll, count


def masked_lm_forward(model: nn.Module, inputs: Tensor, labels: Tensor) -> tuple[Tensor, int, Any]:
    """``masked_lm_nll`` and the model's output (its ``moe`` report, for training)."""
    selected = labels != IGNORE_INDEX
    out = model(inputs, classify=False, mlm_positions=selected)
    nll = F.cross_entropy(_at_least_fp32(out.mlm_logits), labels[selected], reduction="sum")
    return nll, int(selected.sum()), out


def masked_lm_nll(model: nn.Module, inputs: Tensor, labels: Tensor) -> tuple[Tensor, int]:
    """Summed NLL at the selected positions (``labels != -100``), projecting only those."""
    nll, count, _ = masked_lm_forward(model, inputs, labels)
    return nll, count


@torch.no_grad()
def translation_sums(
    model: Any,
    tokenizer: Any,
    pairs: Sequence[tuple[str, str]],
    *,
    label_smoothing: float = 0.0,
    max_len: int | None = None,
    batch_size: int = 64,
) -> tuple[float, float, int]:
    """``(label-smoothed loss, NLL, target tokens)`` summed over ``pairs``, teacher-forced.

    Sides are cut to ``max_len - 1`` tokens (default: the model's positions).
    """
    device = next(model.parameters()).device
    limit = (max_len or model.config.max_len) - 1
    enc = [(tokenizer.encode(s)[:limit], tokenizer.encode(t)[:limit]) for s, t in pairs]
    loss_sum = nll_sum = 0.0
    n_tokens = 0
    for start in range(0, len(enc), batch_size):
        batch = collate_translation(
            enc[start : start + batch_size], tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id
        ).to(device)
        out = label_smoothed_cross_entropy(
            model(batch.src, batch.tgt_in).logits,
            batch.tgt_out,
            epsilon=label_smoothing,
            ignore_index=tokenizer.pad_id,
            reduction="sum",
        )
        loss_sum += float(out.loss)
        nll_sum += float(out.nll)
        n_tokens += int(out.n_tokens)
    return loss_sum, nll_sum, n_tokens


@torch.no_grad()
def block_nll(
    model: nn.Module,
    batches: Iterable[tuple[Tensor, Tensor]],
    *,
    masked: bool,
) -> tuple[float, int]:
    """Summed NLL and scored tokens over ``(x, y)`` batches (``masked``: ``(inputs, labels)``)."""
    total, count = 0.0, 0
    for a, b in batches:
        nll, n = masked_lm_nll(model, a, b) if masked else causal_lm_nll(model, a, b)
        total += float(nll)
        count += n
    return total, count


def mlm_special_ids(config: Any) -> list[int]:
    """Ids an MLM never selects for prediction: pad, BOS, EOS and unknown."""
    from attnkit.data.tokenizers import UNK_ID

    return [config.pad_id, config.bos_id, config.eos_id, UNK_ID]


@torch.no_grad()
def text_perplexity(
    model: Any,
    ids: Tensor,
    *,
    masked: bool,
    batch_size: int = 32,
    max_blocks: int | None = None,
    mask_prob: float = 0.15,
    seed: int = 0,
    block_size: int | None = None,
) -> dict[str, float]:
    """Mean NLL per scored token and perplexity of token stream ``ids`` ``(N,)``.

    The stream is cut into non-overlapping blocks of ``block_size`` tokens
    (default: the model's context, ``config.max_len``; a longer block needs a
    model whose positions reach that far), the first ``max_blocks`` scored.
    A masked LM
    (``masked=True``) predicts ``mask_prob`` of the tokens, masked 80/10/10
    from a generator seeded with ``seed``.
    """
    from attnkit.data.lm import LMBlocks
    from attnkit.data.mlm import mask_tokens

    config = model.config
    device = next(model.parameters()).device
    blocks = LMBlocks(ids, config.max_len if block_size is None else block_size, name="text")
    generator = torch.Generator().manual_seed(seed)

    def batches() -> Iterable[tuple[Tensor, Tensor]]:
        for x, y in blocks.sequential(batch_size, max_blocks=max_blocks):
            if masked:
                x, y = mask_tokens(
                    x, vocab_size=config.vocab_size, mask_id=config.mask_id,
                    special_ids=mlm_special_ids(config), prob=mask_prob, generator=generator,
                )  # fmt: skip
            yield x.to(device), y.to(device)

    was_training = model.training
    model.eval()
    total, count = block_nll(model, batches(), masked=masked)
    model.train(was_training)
    loss = total / max(count, 1)
    return {"loss": loss, "ppl": perplexity(total, max(count, 1)), "tokens": float(count)}
