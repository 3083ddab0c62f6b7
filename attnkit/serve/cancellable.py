"""A ``Stepper`` wrapper that stops cancelled requests at step boundaries.

The searches (greedy, beam, sampling, ``stream``) only ever call ``start``,
``step`` and ``state.reorder``, so the server obeys its request handles by
wrapping the stepper, without touching a decoding loop:

* every row of the batch has an owner group: the handles of the requests the
  row decodes for (one, unless two requests sent the very same sentence);
  ``state.reorder`` carries the owners along with the rows, so the mapping
  holds for any search;
* before each step, if every row's owners are cancelled (the client left,
  the deadline passed, the server is stopping), ``step`` raises
  ``RequestCancelled``: the whole batch stops there;
* otherwise the rows whose owners are all cancelled get logits that end them
  at once (EOS best, every other token 10^4 below), so greedy search finishes
  them on this step and beam search within two, and the batch ends when the
  requests still waiting are done. The other rows' logits are untouched:
  their outputs are what they would have been (beam search ranks within a
  sentence only).

What a cancelled request's rows produce is never handed to anyone (the batcher
answers a cancelled request with its reason). A pass that is not stepped
(fill-mask, classification) cannot stop midway: ``live_requests`` leaves the
requests cancelled before it out of it.

Shapes: ``B`` rows (sentences x beams), ``S`` source length, ``V`` vocabulary.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from attnkit.decoding.protocol import AnyStepper, DecodingState
from attnkit.serve.handles import RequestHandle

__all__ = ["CancellableStepper", "Owners", "live_requests"]

Group = tuple[RequestHandle, ...]
_ENDED = -1e4  # below EOS by this much: finite, so beam search still has K candidates


def _all_cancelled(group: Group) -> bool:
    return all(h.cancelled for h in group)


class Owners:
    """Which requests each row of a batch decodes for, from the sources they sent.

    ``Owners(sources, handles)``: ``handles[i]`` sent ``sources[i]``. ``start``
    receives the padded sources in whatever order the search's caller chose;
    a row is matched by its tokens (trailing ``pad_id`` removed), so the order
    is never assumed. A row whose tokens no source has (not expected) belongs
    to every request: it stops only when they all have.
    """

    def __init__(self, sources: Sequence[Sequence[int]], handles: Sequence[RequestHandle]) -> None:
        if len(sources) != len(handles):
            raise ValueError(f"{len(sources)} sources but {len(handles)} handles")
        self._by_tokens: dict[tuple[int, ...], dict[int, RequestHandle]] = {}
        for src, handle in zip(sources, handles):
            self._by_tokens.setdefault(tuple(src), {})[id(handle)] = handle
        self._everyone = tuple({id(h): h for h in handles}.values())

    @classmethod
    def single(cls, handle: RequestHandle) -> Owners:
        """Every row belongs to ``handle`` (one request: generation, a lone job)."""
        owners = cls([], [])
        owners._everyone = (handle,)
        return owners

    def groups(self, src_ids: Tensor, pad_id: int) -> list[Group]:
        """One owner group per row of ``src_ids`` ``(B, S)``."""
        if not self._by_tokens:
            return [self._everyone] * src_ids.size(0)
        out = []
        for row in src_ids.tolist():
            while row and row[-1] == pad_id:
                row.pop()
            found = self._by_tokens.get(tuple(row))
            out.append(tuple(found.values()) if found else self._everyone)
        return out


@dataclass(frozen=True)
class _OwnedState:
    """The wrapped search state plus, per row, the index of its owner group."""

    inner: DecodingState
    owner: Tensor  # (B,) long, into groups
    groups: tuple[Group, ...]

    def reorder(self, indices: Tensor, *, group_size: int | None = None) -> _OwnedState:
        inner = self.inner.reorder(indices, group_size=group_size)
        return replace(self, inner=inner, owner=self.owner[indices.to(self.owner.device)])


class CancellableStepper:
    """A ``Stepper`` around ``inner`` that obeys the handles of ``owners`` (see module doc)."""

    def __init__(self, inner: AnyStepper, owners: Owners) -> None:
        self.inner = inner
        self.owners = owners
        self.pad_id, self.bos_id, self.eos_id = inner.pad_id, inner.bos_id, inner.eos_id

    @property
    def context_length(self) -> int:
        """The wrapped model's context (``stream`` asks the model, but a caller may ask us)."""
        return int(self.inner.context_length)  # type: ignore[attr-defined]

    def start(self, src_ids: Tensor, *, max_steps: int | None = None) -> _OwnedState:
        groups = self.owners.groups(src_ids, self.pad_id)
        index: dict[Group, int] = {}
        owner = [index.setdefault(g, len(index)) for g in groups]
        unique = tuple(index)
        _check(unique)  # a batch whose requests are all gone is not even encoded
        state = self.inner.start(src_ids, max_steps=max_steps)
        return _OwnedState(state, torch.tensor(owner, device=src_ids.device), unique)

    def step(self, tokens: Tensor, state: DecodingState) -> tuple[Tensor, _OwnedState]:
        assert isinstance(state, _OwnedState), "step() needs the state start() returned"
        ended = _check(state.groups)
        logits, inner = self.inner.step(tokens, state.inner)
        if ended:
            rows = torch.isin(state.owner, torch.tensor(ended, device=state.owner.device))
            forced = torch.full_like(logits[:1], _ENDED)
            forced[:, self.eos_id] = 0.0
            logits = torch.where(rows[:, None].to(logits.device), forced, logits)
        return logits, replace(state, inner=inner)


def _check(groups: Sequence[Group]) -> list[int]:
    """Indices of the groups whose requests are all cancelled; raise if every group is."""
    ended = [i for i, g in enumerate(groups) if _all_cancelled(g)]
    if groups and len(ended) == len(groups):
        first = groups[0][0]
        raise first.error()
    return ended


def live_requests(handles: Sequence[RequestHandle] | None, n: int) -> list[int]:
    """Indices of the ``n`` requests still waiting (all without ``handles``); raise the
    first one's ``RequestCancelled`` if none is (a pass that cannot stop midway)."""
    if handles is None:
        return list(range(n))
    live = [i for i, h in enumerate(handles) if not h.cancelled]
    if handles and not live:
        raise handles[0].error()
    return live
