"""Wrappers that constrain a ``Stepper`` without touching the searches.

``MinLength`` forbids EOS for the first ``min_len`` steps (fairseq's
``--min-len``); benchmarks use it to force a fixed output length, as HF's
``min_new_tokens`` does. Every search in this package accepts the wrapper in
place of the model.
"""

from __future__ import annotations

from typing import Generic

from torch import Tensor

from attnkit.decoding.protocol import S, Stepper
from attnkit.errors import UsageError


class MinLength(Generic[S]):
    """A ``Stepper`` whose EOS logit is ``-inf`` until ``min_len`` tokens were generated.

    All rows advance together, so one step counter (reset by ``start``) is
    enough; the wrapper therefore serves one decoding call at a time.
    """

    def __init__(self, model: Stepper[S], min_len: int) -> None:
        if isinstance(min_len, bool) or not isinstance(min_len, int) or min_len < 0:
            raise UsageError(f"min_len must be an integer >= 0, got {min_len!r}")
        self.model = model
        self.min_len = min_len
        self.pad_id, self.bos_id, self.eos_id = model.pad_id, model.bos_id, model.eos_id
        self._steps = 0

    def start(self, src_ids: Tensor, *, max_steps: int | None = None) -> S:
        self._steps = 0
        return self.model.start(src_ids, max_steps=max_steps)

    def step(self, tokens: Tensor, state: S) -> tuple[Tensor, S]:
        logits, state = self.model.step(tokens, state)
        if self._steps < self.min_len:
            logits = logits.clone()
            logits[:, self.eos_id] = float("-inf")
        self._steps += 1
        return logits, state
