"""Continuous batching of generation: requests join and leave the running batch per token.

Iteration-level scheduling (Orca, Yu et al. 2022; vLLM's scheduler): the
model worker keeps one batch of rows, one per choice of every request in it,
and steps them together, one token per row per step. Between two steps:

* queued requests join, oldest first, while they fit (``max_rows`` rows, and
  the shared position leaves them room for ``max_tokens``): each prompt is
  prefilled alone into a ``RowStartCache`` placed so that its last prompt token
  is fed at the batch's position with the others, and merged in;
* finished choices stop being read; a request whose choices are all finished
  (EOS, a stop string, ``max_tokens``) is answered at once and its rows leave
  the batch, as do the rows of a cancelled request (client gone, time budget,
  shutdown), which frees its slot at the next step.

Each request keeps its own sampling settings and seeded generator, so a row
draws what it would draw alone (greedy: the same tokens, up to float rounding
of the batched products; the tests check equality). Rows of all requests are
fed at one position, which is exact for relative positions only (rotary,
ALiBi, none: ``row_cache``); ``supports`` says whether a model qualifies, and
the server decodes other models one request at a time (``completion``).

Two kinds of job share the batch: the OpenAI-compatible completions (a choice
ends at EOS, a stop string or ``max_tokens``) and ``/v1/generate``
(``until_eos=False``: exactly ``max_tokens`` tokens, EOS included, as
``ModelHost.generate`` gives them; ``top_k`` as well as ``top_p``).

When requests leave, the cache columns before every remaining row's start
are dropped and the shared position moves back with them
(``RowStartCache.shift``), so the attention width follows the live rows
rather than everything the batch has seen since it began; a prompt longer
than the shared position moves it right (empty columns first) to join.
Rotary keys are turned by as many positions (exact up to float rounding:
attention depends on the distance only).

The batch drains (nobody joins) when the next request in the queue does not
fit (rows, or the model's positions for it and every row in the batch), so a
request is not overtaken forever; once the batch is empty the runner returns
and the worker starts that request as the first of a new batch, at a position
of its own prompt's length.

Shapes: ``R`` rows of the batch, ``V`` vocabulary.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from attnkit.decoding.generate import pick_token
from attnkit.positions.rotary import RotaryEmbedding, apply_rotary
from attnkit.serve.batch_types import Admitted, Take
from attnkit.serve.completion import ChoiceText, Completion, OnDelta, context_of, feed
from attnkit.serve.model_host import ModelHost
from attnkit.serve.row_cache import RowStartCache

__all__ = ["GENERATE", "ContinuousGenerator", "GenerationJob", "supports"]

GENERATE = "generate"  # the batcher key of continuously batched generation
_GROW = 256  # positions added to the cache at a time


def supports(engine: ModelHost) -> bool:
    """Whether ``engine``'s model can have sequences at different positions in one batch."""
    config = engine.model.config
    return (
        engine.generates
        and getattr(config, "positions", None) in ("rotary", "alibi", "none")
        and getattr(config, "attention", "dense") == "dense"
        and hasattr(engine.model, "decode")
    )


@dataclass
class GenerationJob:
    """One prompt's choices, as ``completion.generate_choices`` takes them."""

    prompt: list[int]
    n: int
    max_tokens: int
    temperature: float
    top_p: float
    seed: int
    stops: Sequence[str] = ()
    on_delta: OnDelta | None = None
    first_index: int = 0
    top_k: int = 0  # sample from the k best (0: all)
    until_eos: bool = True  # False: ``/v1/generate``'s ``max_tokens`` tokens, EOS or not


def _job(payload: object) -> GenerationJob:
    """The job of an item queued under ``GENERATE`` (only generation jobs are)."""
    assert isinstance(payload, GenerationJob), f"not a generation job: {type(payload).__name__}"
    return payload


@dataclass
class _Sequence:
    job: GenerationJob
    admitted: Admitted
    choices: list[ChoiceText]
    generator: torch.Generator
    drawn: int = 0
    rows: list[int] = field(default_factory=list)  # this request's rows in the batch

    @property
    def done(self) -> bool:
        return all(c.finish_reason is not None for c in self.choices)


class ContinuousGenerator:
    """The runner of ``DynamicBatcher``'s continuous key for generation (module doc)."""

    def __init__(self, engine: ModelHost, *, max_rows: int = 16) -> None:
        if not supports(engine):
            raise ValueError("continuous batching needs a causal LM with relative positions")
        self.engine, self.max_rows = engine, max_rows
        config = engine.model.config
        self.layers, self.heads, self.head_dim = config.num_layers, config.kv_heads, config.head_dim
        self.max_len: int = engine.max_len
        self.eos = int(engine.model.eos_id)
        weight = next(p for p in engine.model.parameters() if p.is_floating_point())
        self.dtype, self.device = weight.dtype, weight.device
        self._rotary = next(
            (m for m in engine.model.modules() if isinstance(m, RotaryEmbedding)), None
        )

    def _rotate(self, keys: Tensor, by: int) -> Tensor:
        """Rotary keys ``(R, h, C, d)`` turned by ``by`` positions (``trim``); others as is."""
        if self._rotary is None:
            return keys
        cos, sin = self._rotary(torch.tensor([abs(by)], device=keys.device))
        return apply_rotary(keys, keys, cos, sin if by >= 0 else -sin)[1]

    def fits_alone(self, job: GenerationJob) -> bool:
        """Whether ``job`` fits the model's context at all (else: decode it alone, sliding)."""
        return (job.max_tokens >= 1 and len(job.prompt) - 1 + job.max_tokens <= self.max_len
                and job.n <= self.max_rows)  # fmt: skip

    @torch.no_grad()
    def __call__(self, first: Admitted, take: Take) -> None:
        seqs: list[_Sequence] = []
        position = len(_job(first.payload).prompt) - 1
        cache = self._cache(0, position)
        inputs: list[int] = []  # the next token each row feeds

        def fits(payload: object) -> bool:
            job = _job(payload)
            rows = sum(len(s.rows) for s in seqs)
            # A longer prompt moves the batch's positions right: every row must still fit.
            at = max(position, len(job.prompt) - 1)
            left = max((s.job.max_tokens - s.drawn for s in seqs), default=0)
            return (rows + job.n <= self.max_rows
                    and at + max(job.max_tokens, left) <= self.max_len)  # fmt: skip

        admitted: Admitted | None = first
        while True:
            while admitted is not None:  # join: prefill alone, then merge
                job = _job(admitted.payload)
                lift = len(job.prompt) - 1 - position
                if lift > 0:  # its prompt needs more positions than the batch has so far
                    cache.shift(lift, self._rotate)
                    position += lift
                seq = self._prefill(admitted, cache, position)
                seq.rows = list(range(len(inputs), len(inputs) + job.n))
                inputs += [job.prompt[-1]] * job.n
                seqs.append(seq)
                admitted = take(fits)
            if not seqs:
                return
            if position + 1 > cache.capacity:  # room for the position fed now
                cache.grow(min(self.max_len, position + _GROW))
            tokens = torch.tensor(inputs, dtype=torch.long, device=self.device)
            logits = self.engine.model.decode(tokens[:, None], cache)
            cache.advance(1)
            position += 1
            inputs = self._draw(seqs, logits, inputs)
            keep = [s for s in seqs if not self._answered(s)]
            if len(keep) != len(seqs):  # evict the rows of answered requests
                rows = [r for s in keep for r in s.rows]
                cache.reorder(torch.tensor(rows, dtype=torch.long, device=self.device))
                inputs = [inputs[r] for r in rows]
                n = 0
                for s in keep:
                    s.rows, n = list(range(n, n + len(s.rows))), n + len(s.rows)
                seqs = keep
                if seqs:  # the columns before every live row's start: nobody's any more
                    drop = int(cache.start.min())
                    cache.shift(-drop, self._rotate)
                    position -= drop
            # Empty: return, and the worker starts the next request afresh (at its own prompt).
            admitted = take(fits) if seqs else None

    def _cache(self, rows: int, position: int) -> RowStartCache:
        capacity = min(self.max_len, -(-(position + 1) // _GROW) * _GROW)
        return RowStartCache.empty(self.layers, self.heads, self.head_dim, capacity=capacity,
                                   position=position, rows=rows, dtype=self.dtype,
                                   device=self.device)  # fmt: skip

    def _prefill(self, admitted: Admitted, cache: RowStartCache, position: int) -> _Sequence:
        job = _job(admitted.payload)
        prefix = len(job.prompt) - 1
        alone = RowStartCache.empty(self.layers, self.heads, self.head_dim,
                                    capacity=cache.capacity, position=position - prefix, rows=1,
                                    dtype=self.dtype, device=self.device)  # fmt: skip
        if prefix:
            ids = torch.tensor([job.prompt[:-1]], dtype=torch.long, device=self.device)
            self.engine.model.decode(ids, alone)
        cache.merge(alone, repeat=job.n)
        context = context_of(job.prompt)
        choices = [ChoiceText(self.engine.tokenizer, context, job.stops) for _ in range(job.n)]
        generator = torch.Generator(device=self.device).manual_seed(job.seed)
        return _Sequence(job, admitted, choices, generator)

    def _draw(self, seqs: list[_Sequence], logits: Tensor, inputs: list[int]) -> list[int]:
        """Each request's tokens from its rows' logits, with its own settings and generator."""
        out = list(inputs)
        for s in seqs:
            if s.admitted.handle.cancelled:
                continue
            job = s.job
            rows = torch.tensor(s.rows, dtype=torch.long, device=logits.device)
            picked = pick_token(logits.index_select(0, rows), temperature=job.temperature,
                                top_k=job.top_k, top_p=job.top_p,
                                generator=s.generator).tolist()  # fmt: skip
            s.drawn += 1
            for i, (row, token) in enumerate(zip(s.rows, picked, strict=True)):
                out[row] = int(token)
                choice = s.choices[i]
                if choice.finish_reason is not None:
                    continue
                if not job.until_eos:  # the raw ids, as ``ModelHost.generate`` returns them
                    choice.ids.append(int(token))
                    if s.drawn == job.max_tokens:
                        choice.finish_reason = "length"
                    continue
                text = feed(choice, int(token), eos=self.eos, last=s.drawn == job.max_tokens)
                if job.on_delta is not None and (text or choice.finish_reason is not None):
                    job.on_delta(job.first_index + i, text, choice.openai_reason)
        return out

    def _answered(self, s: _Sequence) -> bool:
        """Answer ``s`` if it is done or cancelled; whether it was."""
        handle = s.admitted.handle
        if handle.cancelled:
            s.admitted.finish(None, handle.error())
            return True
        if s.done:
            s.admitted.finish(Completion(len(s.job.prompt), s.choices), None)
            return True
        return False
