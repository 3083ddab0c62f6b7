"""Sharing the generation rows between requests: a request's choices run a few rows at a time.

The continuous batch has ``--max-generation-rows`` rows and admits queued
requests oldest first while they fit (``attnkit.serve.continuous``). A request
asking ``n`` choices of ``max_tokens`` tokens held ``n`` rows for all of its
tokens, so two requests with ``n: 8`` filled 16 rows and a 2-token request
queued behind them for a whole 1,024-token generation.

So a request holds at most ``share`` rows at once (``--max-rows-per-request``,
by default a quarter of the rows): its choices are split into parts of at most
``share`` rows (``split``), and ``run_shared`` queues its next part only when
rows of its own have finished. A part queued later goes behind what others
queued meanwhile (round robin between requests), and with the default share
four requests can hold every row only together: one or two clients, however
large their ``n``, leave rows free for a small request to join the running
batch at the next step.

Each part is seeded from the request's seed and the index of its first choice,
so a request with a ``seed`` still gets the same choices every time (whatever
else runs); a part's choices are those of a request of its size.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace

from attnkit.serve.completion import Completion
from attnkit.serve.continuous import GenerationJob

__all__ = ["Part", "row_share", "run_shared", "split"]

_SEED_STEP = 0x9E3779B97F4A7C15  # an odd 64-bit constant: parts' seeds far apart
_SEEDS = 1 << 63

Part = tuple[int, GenerationJob]
"""``(k, job)``: a part of the ``k``-th prompt's choices."""


def row_share(max_rows: int, per_request: int | None = None) -> int:
    """The rows one request may hold at once: ``per_request``, else a quarter of ``max_rows``."""
    share = per_request if per_request is not None else max_rows // 4
    return max(1, min(share, max_rows))


def split(jobs: Sequence[GenerationJob], share: int) -> list[Part]:
    """Each job's ``n`` choices as parts of at most ``share`` choices, in order."""
    parts: list[Part] = []
    for k, job in enumerate(jobs):
        for start in range(0, job.n, share):
            seed = (job.seed + start * _SEED_STEP) % _SEEDS
            part = replace(job, n=min(share, job.n - start), seed=seed,
                           first_index=job.first_index + start)  # fmt: skip
            parts.append((k, part))
    return parts


async def run_shared(
    parts: Sequence[Part],
    prompts: int,
    share: int,
    submit: Callable[[GenerationJob], Awaitable[Completion]],
) -> list[Completion]:
    """Submit ``parts`` in order, at most ``share`` rows at once (always at least one part);
    the completions of the ``prompts`` prompts, each part's choices in order.

    The first error ends it: the parts still running are cancelled and awaited, so
    nothing is left pending.
    """
    done: list[Completion | None] = [None] * len(parts)
    running: dict[asyncio.Future[Completion], int] = {}
    rows, following = 0, 0

    def fits() -> bool:  # the next part, within the share (one part at least runs)
        return following < len(parts) and (not running or rows + parts[following][1].n <= share)

    try:
        while following < len(parts) or running:
            while fits():
                running[asyncio.ensure_future(submit(parts[following][1]))] = following
                rows += parts[following][1].n
                following += 1
            finished, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            for future in finished:
                i = running.pop(future)
                rows -= parts[i][1].n
                done[i] = future.result()  # an error ends it all (finally)
    finally:
        for future in running:
            future.cancel()
        if running:
            await asyncio.gather(*running, return_exceptions=True)
    out = [Completion(0, []) for _ in range(prompts)]
    for (k, _), completion in zip(parts, done, strict=True):
        assert completion is not None
        out[k].prompt_tokens = completion.prompt_tokens
        out[k].choices.extend(completion.choices)
    return out
