"""A small draft model as speculative decoding's drafter (Leviathan et al., 2023).

A decoder-only LM with the target's vocabulary (a smaller model of the same
family, or a LoRA-merged small one) proposes ``k`` tokens autoregressively on
its own KV cache; ``attnkit.decoding.speculative`` checks them with the target
in one pass. Greedy drafts are the draft's argmax (a one-hot ``q``); sampled
drafts are drawn from the draft's distribution after the same temperature,
top-k and top-p as the target's, and that distribution goes with the draft
(``Draft.probs``) for the acceptance rule.

The draft's cache mirrors the sequence: after proposing ``k`` tokens after
``L`` ids it holds ``L + k - 1`` positions (the last draft token is never fed);
``accepted(n)`` cuts it back to ``L + min(n, k - 1)``, and the next proposal
feeds the ids it has not seen (the model's own token, and any tokens the
target produced without a draft) in one pass before drafting again.

Shapes: ``L`` sequence length, ``V`` vocabulary, ``k`` draft length.
"""

from __future__ import annotations

from typing import Any

import torch

from attnkit.decoding.protocol import (
    AnyStepper,
    CausalStepper,
    Draft,
    RewindableState,
    Verifier,
)
from attnkit.decoding.speculative import Sampling
from attnkit.errors import UsageError


class ModelDrafter:
    """A ``Drafter`` running a draft ``model`` (a ``CausalStepper`` and ``Verifier``).

    Args:
        model: the draft LM in eval mode, the target's vocabulary.
        sampling: greedy (default) or the target's sampling settings and generator.
        stepper: what steps ``model`` (default: the model), e.g. its prepared stepper.

    ``forwards`` counts the draft's model passes.
    """

    def __init__(
        self,
        model: CausalStepper[Any],
        *,
        sampling: Sampling | None = None,
        stepper: AnyStepper | None = None,
    ) -> None:
        if not isinstance(model, Verifier):
            raise UsageError(f"draft model: {type(model).__name__} cannot feed several tokens")
        self.model = model
        self.verifier: Verifier[Any] = model
        self.steps: AnyStepper = model if stepper is None else stepper
        self.how = Sampling() if sampling is None else sampling
        self.forwards = 0
        self._state: RewindableState | None = None
        self._cached = 0  # the cache's positions hold ids[: self._cached]
        self._proposed = (0, 0)  # (L, k) of the last draft

    def propose(self, ids: list[int], k: int) -> Draft:
        """Up to ``k`` tokens after ``ids``; none past the draft model's context."""
        # The fed positions (ids and all but the last draft token) stay inside the context.
        k = min(k, self.model.context_length - len(ids) + 1)
        if k <= 0 or not ids:
            return Draft([])
        device = self._device()
        logits = self._catch_up(ids, device)  # (1, V): after ids
        tokens: list[int] = []
        rows: list[torch.Tensor] = []
        for i in range(k):
            if self.how.greedy:
                token = int(logits[0].argmax())
            else:
                q = self.how.probs(logits)[0]  # (V,)
                token = self.how.draw(q)
                rows.append(q)
            tokens.append(token)
            if i + 1 < k:
                assert self._state is not None
                logits, state = self.steps.step(torch.tensor([token], device=device), self._state)
                self._state = state
                self.forwards += 1
        self._proposed = (len(ids), k)
        return Draft(tokens, torch.stack(rows) if rows else None)

    def accepted(self, n: int) -> None:
        """Forget the cached draft tokens after the ``n`` accepted ones."""
        length, k = self._proposed
        keep = length + min(n, k - 1)
        if self._state is not None and keep < length + k - 1:
            self._state = self._state.truncate(keep)
        self._cached = keep

    def _device(self) -> torch.device:
        if isinstance(self.model, torch.nn.Module):
            return next(self.model.parameters()).device
        return torch.device("cpu")

    def _catch_up(self, ids: list[int], device: torch.device) -> torch.Tensor:
        """Feed the ids the cache lacks; the draft's logits ``(1, V)`` after ``ids``."""
        if self._state is None:
            prompt = torch.tensor([ids], device=device)
            context = self.model.context_length
            state = self.steps.start(prompt, max_steps=context - len(ids) + 1)
            if not isinstance(state, RewindableState) or not state.rewindable:
                raise UsageError(
                    f"draft model: {type(self.model).__name__}'s cache cannot be rolled "
                    "back (linear attention); use a key/value-cache model as the draft"
                )
            logits, state = self.steps.step(prompt[:, -1], state)
        else:
            new = torch.tensor([ids[self._cached :]], device=device)  # (1, t), t >= 1
            if new.size(1) == 1:
                logits, state = self.steps.step(new[:, 0], self._state)
            else:
                every, state = self.verifier.verify(new, self._state)
                logits = every[:, -1]
        self.forwards += 1
        self._state = state
        self._cached = len(ids)
        return logits
