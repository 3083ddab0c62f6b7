"""Greedy search: the most probable next token at every step."""

from __future__ import annotations

import torch
from torch import Tensor

from attnkit.decoding.common import DecodeResult, SearchSettings, decode_loop
from attnkit.decoding.protocol import AnyStepper


def _argmax(logits: Tensor, logp: Tensor) -> Tensor:
    return logp.argmax(dim=-1)


@torch.no_grad()
def greedy_search(
    model: AnyStepper,
    src_ids: Tensor,
    *,
    max_len_a: float = 1.0,
    max_len_b: int = 50,
    max_len: int | None = None,
    check_every: int | None = None,
    search: SearchSettings | None = None,
) -> DecodeResult:
    """Decode ``src_ids`` ``(B, S)`` greedily, all sentences at once.

    Args:
        model: a ``Stepper`` (put an ``nn.Module`` in eval mode first).
        src_ids: source token ids, padded with ``model.pad_id``.
        max_len_a, max_len_b: each sentence generates at most
            ``floor(max_len_a * src_len + max_len_b)`` tokens, EOS included
            (default: source length + 50), where ``src_len`` counts non-pad tokens.
        max_len: optional cap on that limit, the same for every sentence.
        check_every: stop as soon as every sentence has finished, checked every
            this many steps (each check is one host-device sync; 0 never checks;
            ``None``: ``search``'s, see ``attnkit.decoding.common``). The outputs
            never depend on it.
        search: the device's settings (``SearchSettings``), which the
            inference plan decides (``attnkit.inference``); default: the CPU's.

    Returns:
        ``DecodeResult`` with each sentence's tokens (no BOS/EOS) and summed log-prob.
    """
    return decode_loop(
        model,
        src_ids,
        _argmax,
        max_len_a=max_len_a,
        max_len_b=max_len_b,
        max_len=max_len,
        check_every=check_every,
        search=search,
    )
