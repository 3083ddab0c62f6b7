"""The stepping protocol that every decoder (greedy, beam, sampling) is built on.

A model that can be decoded implements two methods:

* ``start(src_ids, *, max_steps=None) -> state``: encode the source once
  (decoder-only models take a prompt instead). ``max_steps`` bounds the
  ``step`` calls that follow (the search's length limit); a model may use it
  to size its cache once, or ignore it.
* ``step(tokens, state) -> (logits, state)``: feed one new target token per
  sequence, ``tokens`` ``(B,)`` long, and get next-token logits ``(B, V)``.

The state is an explicit object (it owns the KV cache); beam search reorders
it with ``state.reorder(indices, group_size=K)`` where ``indices`` ``(B',)``
selects, for each new row, the old row it continues. ``group_size`` says the
rows come in groups of ``K`` beams of one sentence and the indices never leave
their group, so parts computed from the source may stay where they are.
``reorder`` may work in place but must return the state to use afterwards.

Keeping this protocol tiny is what lets the same search code serve the
encoder-decoder Transformer, decoder-only LMs and RNN seq2seq models, and
wrappers (``attnkit.decoding.static``, ``attnkit.decoding.constraints``) that
change how a model steps without touching the searches.

Capabilities beyond it are declared by protocols too, never probed:
``CausalStepper`` (a language model with a context length, for ``stream``),
``SupportsStaticCache`` (``attnkit.decoding.static``), ``FixedBatch`` (a
stepper that wants the batch size to stay put), and ``Verifier`` with
``RewindableState`` (several tokens per step and a rollback: speculative
decoding, ``attnkit.decoding.speculative``), whose drafts come from a
``Drafter`` (prompt lookup, ``attnkit.decoding.lookup``, or a small draft
model, ``attnkit.decoding.draft``).

Beam search also reorders to fewer rows (``indices`` shorter than the batch):
the done sentences leave the batch, each kept sentence's ``K`` rows staying
together. It then passes no ``group_size``: a state that shares the source side
among a sentence's beams keeps it shared when every new group of rows comes
from one old group (``DecoderState``), and otherwise makes it follow the rows.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol, Self, TypeVar, runtime_checkable

from torch import Tensor


@runtime_checkable
class DecodingState(Protocol):
    """Per-batch decoding state (encoder output, masks, KV cache)."""

    def reorder(self, indices: Tensor, *, group_size: int | None = None) -> Self:
        """Select/permute batch rows: row ``i`` of the result is old row ``indices[i]``."""
        ...


S = TypeVar("S", bound=DecodingState)


@runtime_checkable
class Stepper(Protocol[S]):
    """A model (or wrapper) that can be decoded one token at a time."""

    pad_id: int
    bos_id: int
    eos_id: int

    def start(self, src_ids: Tensor, *, max_steps: int | None = None) -> S:
        """Encode ``src_ids`` ``(B, S)`` and return the initial state."""
        ...

    def step(self, tokens: Tensor, state: S) -> tuple[Tensor, S]:
        """Feed ``tokens`` ``(B,)``; return logits ``(B, V)`` and the updated state."""
        ...


@runtime_checkable
class CausalStepper(Stepper[S], Protocol[S]):
    """A language model: ``start`` takes a prompt; it sees ``context_length`` positions."""

    @property
    def context_length(self) -> int: ...


@runtime_checkable
class FixedBatch(Protocol):
    """A stepper whose batch should stay as it is during a search when ``fixed_batch``
    is true: each new shape costs it a compile (a compiled step), or a row's outputs
    depend on the other rows (int8 activations quantised per tensor), so dropping
    rows would change what the rest decode."""

    fixed_batch: bool


@runtime_checkable
class RewindableState(DecodingState, Protocol):
    """A state whose cache can forget its newest positions (``rewindable`` says if it can)."""

    @property
    def rewindable(self) -> bool: ...

    def truncate(self, length: int) -> Self:
        """Keep the first ``length`` cached target positions."""
        ...


@runtime_checkable
class Verifier(Protocol[S]):
    """A model that scores several fed tokens in one pass (speculative decoding's check)."""

    def verify(self, tokens: Tensor, state: S) -> tuple[Tensor, S]:
        """Feed ``tokens`` ``(B, t)``; return the logits after each ``(B, t, V)``."""
        ...


class Draft(NamedTuple):
    """Tokens proposed to follow a sequence, and how they were drawn.

    Attributes:
        tokens: the proposed ids, ``d`` of them (empty: no proposal).
        probs: ``(d, V)``, row ``i`` the distribution ``tokens[i]`` was drawn from
            (a draft model's, after the same temperature/top-k/top-p as the target's);
            ``None`` when the tokens were chosen deterministically (a lookup, an argmax),
            i.e. each row is one-hot at its token.
    """

    tokens: list[int]
    probs: Tensor | None = None


@runtime_checkable
class Drafter(Protocol):
    """What proposes a draft for speculative decoding to verify (one sequence).

    ``propose(ids, k)`` drafts up to ``k`` tokens to follow ``ids`` (the whole
    sequence so far, prompt included; it only ever grows at the end between calls,
    apart from what ``accepted`` says was rejected). ``accepted(n)`` tells the
    drafter that the first ``n`` tokens of its last non-empty draft were kept and
    the rest thrown away, so it can roll back what it built on them (its cache).
    """

    def propose(self, ids: list[int], k: int) -> Draft: ...

    def accepted(self, n: int) -> None: ...


AnyStepper = Stepper[Any]
