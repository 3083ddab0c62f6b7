"""Masked-language-model corruption (Devlin et al., 2019, §3.1 "Task #1").

Each non-special token is selected with probability ``prob`` (15%); a
selected token is replaced by the mask token 80% of the time, by a random
token 10% of the time and kept 10% of the time. The model is trained to
predict the original token at selected positions only: ``labels`` hold it
there and ``ignore_index`` (-100, ``F.cross_entropy``'s default) elsewhere.

attnkit's own tokenizers have no mask token; ``mlm_vocab`` then gives the
model one more id for it (an imported BERT's tokenizer has its ``[MASK]``).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor

from attnkit.data.tokenizers import Tokenizer
from attnkit.errors import UsageError

IGNORE_INDEX = -100


def mlm_vocab(tokenizer: Tokenizer) -> tuple[int, int]:
    """``(vocab_size, mask_id)`` for an MLM model: the tokenizer's own mask token if it
    has one, otherwise its ids plus one mask id."""
    if tokenizer.mask_id is not None:
        return tokenizer.vocab_size, tokenizer.mask_id
    return tokenizer.vocab_size + 1, tokenizer.vocab_size


def encoder_vocab_fields(tokenizer: Tokenizer) -> dict[str, object]:
    """An encoder-only model's vocabulary fields when it starts from scratch: they follow
    ``tokenizer`` (``mlm_vocab``'s size and mask id, and its special ids)."""
    vocab_size, mask_id = mlm_vocab(tokenizer)
    return {"vocab_size": vocab_size, "mask_id": mask_id, "pad_id": tokenizer.pad_id,
            "bos_id": tokenizer.bos_id, "eos_id": tokenizer.eos_id}  # fmt: skip


def mask_tokens(
    ids: Tensor,
    *,
    vocab_size: int,
    mask_id: int,
    special_ids: Iterable[int],
    prob: float = 0.15,
    generator: torch.Generator | None = None,
    ignore_index: int = IGNORE_INDEX,
) -> tuple[Tensor, Tensor]:
    """Corrupt ``ids`` ``(B, S)`` for MLM; returns ``(inputs, labels)``, both ``(B, S)``.

    Args:
        vocab_size: random replacements are drawn uniformly from the ids in
            ``0 .. vocab_size - 1`` that are neither special nor ``mask_id``.
        mask_id: the mask token's id.
        special_ids: ids never selected (pad, BOS, EOS, ...); padding must be
            among them.
        prob: selection probability per eligible token, in ``[0, 1]``.
        generator: seeded ``torch.Generator`` on ``ids``' device, for
            reproducible masks.
        ignore_index: the label of positions not selected.
    """
    if not 0.0 <= prob <= 1.0:
        raise UsageError(f"prob must be in [0, 1], got {prob!r}")
    if not 0 <= mask_id < vocab_size:
        raise UsageError(f"mask_id must be in [0, vocab_size={vocab_size}), got {mask_id}")
    special = torch.tensor(sorted(set(special_ids)), dtype=torch.long, device=ids.device)
    allowed = torch.ones(vocab_size, dtype=torch.bool, device=ids.device)
    allowed[special[(special >= 0) & (special < vocab_size)]] = False
    allowed[mask_id] = False
    replacements = allowed.nonzero().squeeze(1)
    if replacements.numel() == 0:
        raise UsageError("vocab_size: no ordinary token is left to draw random replacements from")

    eligible = ~torch.isin(ids, torch.cat([special, special.new_tensor([mask_id])]))
    # All of a row's randomness comes from one draw, rows in order: a batch masks
    # exactly as its rows would one by one (so splitting a batch for gradient
    # accumulation or across ranks changes nothing). Per token: select?, how
    # (80/10/10), which random replacement.
    u = torch.rand((*ids.shape, 3), generator=generator, device=ids.device)
    selected = eligible & (u[..., 0] < prob)
    how = u[..., 1]
    to_mask = selected & (how < 0.8)
    to_random = selected & (how >= 0.8) & (how < 0.9)
    pick = (u[..., 2] * replacements.numel()).long().clamp(max=replacements.numel() - 1)
    inputs = torch.where(to_mask, torch.full_like(ids, mask_id), ids)
    inputs = torch.where(to_random, replacements[pick], inputs)
    labels = torch.where(selected, ids, torch.full_like(ids, ignore_index))
    return inputs, labels
