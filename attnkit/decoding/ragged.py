"""Greedy continuation of many prompts of different lengths at once (decoder-only LMs).

``continue_prompts`` sorts the prompts by length, right-pads each batch of
them and continues it with ``attnkit.decoding.generate.stream`` (the one
generator), stepped by ``RaggedPrompts``: its ``start`` prefills the padded
batch into a ``RaggedKVCache`` and then puts every row back at its own last
prompt token, so each row is decoded at its own positions and never sees the
padding: the tokens the prompt gets alone (up to float rounding of the
batched products; the tests check equality in fp32; a model whose int8 linears
quantise activations per tensor makes each row depend on its batch, as in beam
search). A row stops at its EOS
(``stream`` pads it afterwards; the padding is dropped), a batch when every
row has.

Which models (``supports_ragged``): decoder-only, dense attention, a
key/value cache, and positions a row can have of its own (learned,
sinusoidal, rotary, none). Others (ALiBi, T5's bias, Shaw's relative terms,
local or linear attention), a batch of one, and a batch whose longest prompt
and continuation would slide past the context are continued one prompt at a
time through the same ``stream``, with the caller's stepper.

Shapes: ``B`` prompts of a batch, ``T`` the longest, ``N`` new tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import torch
from torch import Tensor

from attnkit.attention.ragged_cache import RaggedKVCache
from attnkit.decoding.common import check_int
from attnkit.decoding.generate import stream
from attnkit.decoding.protocol import AnyStepper
from attnkit.decoding.static import SupportsStaticCache
from attnkit.models.state import CacheLayout, DecoderState

# Positions of a row's own (per-row position ids); the rest are computed from key columns.
RAGGED_POSITIONS = ("learned", "sinusoidal", "rotary", "none")


class RaggedModel(SupportsStaticCache, Protocol):
    """A decoder-only LM that starts on any cache it is given (``DecoderOnlyLM``)."""

    @property
    def config(self) -> object: ...

    @property
    def context_length(self) -> int: ...


def supports_ragged(model: object) -> bool:
    """Whether ``model``'s rows can be decoded at positions of their own (module doc)."""
    config = getattr(model, "config", None)
    return (
        getattr(config, "family", None) == "decoder_only"
        and getattr(config, "positions", None) in RAGGED_POSITIONS
        and getattr(config, "attention", None) == "dense"
        and isinstance(model, SupportsStaticCache)
        and model.cache_layout() is not None
    )


def _ragged_cache(
    layout: CacheLayout,
    *,
    batch_size: int,
    positions: int,
    dtype: torch.dtype,
    device: torch.device,
    cross: tuple[Tensor, Tensor] | None = None,
) -> RaggedKVCache:
    """A ``CacheFactory``: rows of their own lengths, ``positions`` deep."""
    return RaggedKVCache.allocate(layout.num_layers, batch_size, layout.num_heads,
                                  layout.head_dim, capacity=positions, dtype=dtype,
                                  device=device)  # fmt: skip


class RaggedPrompts:
    """A ``Stepper`` over ``model`` for right-padded prompts of ``lengths`` ``(B,)``."""

    def __init__(self, model: RaggedModel, lengths: Tensor) -> None:
        self.model, self.lengths = model, lengths
        self.pad_id, self.bos_id, self.eos_id = model.pad_id, model.bos_id, model.eos_id

    def start(self, src_ids: Tensor, *, max_steps: int | None = None) -> DecoderState:
        """Prefill ``src_ids`` ``(B, T)`` (right-padded); each row's last prompt token is
        fed by the first ``step``, at its own position."""
        state = self.model.start(src_ids, max_steps=max_steps, cache=_ragged_cache)
        cache = state.cache
        if not isinstance(cache, RaggedKVCache):
            raise TypeError(f"{type(self.model).__name__}.start ignored the cache it was given")
        last = self.lengths.to(src_ids.device) - 1
        cache.set_lengths(last)  # the last prompt token's keys are written again, the same
        state.pending = src_ids.gather(1, last[:, None]).squeeze(1)
        return state

    def step(self, tokens: Tensor, state: DecoderState) -> tuple[Tensor, DecoderState]:
        return self.model.step(tokens, state)


def _until(tokens: list[int], eos_id: int) -> list[int]:
    return tokens[: tokens.index(eos_id)] if eos_id in tokens else tokens


@torch.no_grad()
def continue_prompts(
    model: RaggedModel,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    *,
    eos_id: int,
    batch_size: int = 32,
    stepper: AnyStepper | None = None,
    device: torch.device | str = "cpu",
) -> list[list[int]]:
    """Each prompt's greedy continuation, in order: at most ``max_new_tokens`` tokens,
    up to its first ``eos_id`` (not included). ``stepper``: what continues a prompt
    alone (default: ``model``); see the module doc."""
    check_int("batch_size", batch_size, 1)
    check_int("max_new_tokens", max_new_tokens, 1)
    if any(len(p) < 1 for p in prompts):
        raise ValueError("prompts: every prompt needs at least one token")
    out: list[list[int]] = [[] for _ in prompts]
    order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))  # little padding
    ragged = supports_ragged(model)
    for first in range(0, len(order), batch_size):
        chunk = order[first : first + batch_size]
        longest = len(prompts[chunk[0]])
        if not ragged or len(chunk) == 1 or longest + max_new_tokens - 1 > model.context_length:
            for i in chunk:
                ids = torch.tensor([list(prompts[i])], dtype=torch.long, device=device)
                alone = stream(model, ids, max_new_tokens, temperature=0.0, eos_id=eos_id,
                               stepper=stepper)  # fmt: skip
                out[i] = _until([int(t) for t in torch.cat(list(alone)).tolist()], eos_id)
            continue
        ids = torch.full((len(chunk), longest), model.pad_id, dtype=torch.long)
        for row, i in enumerate(chunk):
            ids[row, : len(prompts[i])] = torch.tensor(list(prompts[i]), dtype=torch.long)
        lengths = torch.tensor([len(prompts[i]) for i in chunk], device=device)
        rows = RaggedPrompts(model, lengths)
        steps = stream(model, ids.to(device), max_new_tokens, temperature=0.0, eos_id=eos_id,
                       stepper=rows)  # fmt: skip
        new = torch.stack(list(steps), dim=1).tolist()  # (B, <= N)
        for row, i in enumerate(chunk):
            out[i] = _until([int(t) for t in new[row]], eos_id)
    return out
