"""The stepping protocol that every decoder (greedy, beam, sampling) is built on.

A model that can be decoded implements two methods:

* ``start(src_ids) -> state``: encode the source once. ``src_ids`` is ``(B, S)``
  (decoder-only models may accept ``None``/a prompt instead).
* ``step(tokens, state) -> (logits, state)``: feed one new target token per
  sequence, ``tokens`` ``(B,)`` long, and get next-token logits ``(B, V)``.

The state is an explicit object (it owns the KV cache); beam search reorders
it with ``state.reorder(indices)`` where ``indices`` ``(B',)`` selects, for
each new row, the old row it continues. ``reorder`` may work in place but
must return the state to use afterwards.

Keeping this protocol tiny is what lets the same search code serve the
encoder-decoder Transformer, decoder-only LMs and RNN seq2seq models.

One optional extension, for models that preallocate: a model that sets
``accepts_max_steps = True`` is started with
``start(src_ids, max_steps=T)``, where ``T`` bounds the number of ``step``
calls that follow (the search's length bound), so it can size a static KV
cache once. Every other model is started with ``start(src_ids)`` as before
(``start_decoding`` does the dispatch).

A second optional extension, for beam search: a state may define
``reorder_beams(indices, beam_size)``, called instead of ``reorder`` once the
batch is ``B * beam_size`` rows in groups of consecutive beams, with indices
that never leave their group. Parts of the state that are identical within a
group (everything computed from the source) may then stay where they are.
"""

from __future__ import annotations

from typing import Protocol, TypeVar, runtime_checkable

from torch import Tensor

S = TypeVar("S", bound="DecodingState")


@runtime_checkable
class DecodingState(Protocol):
    """Per-batch decoding state (encoder output, masks, KV cache)."""

    def reorder(self: S, indices: Tensor) -> S:
        """Select/permute batch rows: row ``i`` of the result is old row ``indices[i]``."""
        ...


@runtime_checkable
class Stepper(Protocol):
    """A model that can be decoded one token at a time."""

    pad_id: int
    bos_id: int
    eos_id: int

    def start(self, src_ids: Tensor) -> DecodingState:
        """Encode ``src_ids`` ``(B, S)`` and return the initial state."""
        ...

    def step(self, tokens: Tensor, state: DecodingState) -> tuple[Tensor, DecodingState]:
        """Feed ``tokens`` ``(B,)``; return logits ``(B, V)`` and the updated state."""
        ...


def start_decoding(model: Stepper, src_ids: Tensor, max_steps: int) -> DecodingState:
    """``model.start(src_ids)``, passing ``max_steps`` to models that accept it."""
    if getattr(model, "accepts_max_steps", False):
        return model.start(src_ids, max_steps=max_steps)  # type: ignore[call-arg]
    return model.start(src_ids)
