"""Rows shared between requests (``attnkit.serve.fairness``), with a stand-in batch."""

from __future__ import annotations

import asyncio

import pytest

from attnkit.serve.completion import ChoiceText, Completion
from attnkit.serve.continuous import GenerationJob
from attnkit.serve.fairness import row_share, run_shared, split


def _job(n: int, first_index: int = 0, seed: int = 7) -> GenerationJob:
    return GenerationJob([5, 6, 7], n, 4, 1.0, 1.0, seed, first_index=first_index)


def test_row_share():
    assert row_share(16) == 4 and row_share(2) == 1 and row_share(16, 16) == 16
    assert row_share(16, 40) == 16 and row_share(16, 0) == 1


def test_split_keeps_indices_and_seeds_parts_apart():
    parts = split([_job(8), _job(3, first_index=8)], share=4)
    assert [(k, j.n, j.first_index) for k, j in parts] == [(0, 4, 0), (0, 4, 4), (1, 3, 8)]
    assert parts[0][1].seed == 7 and parts[2][1].seed == 7  # a request's first part: its seed
    assert parts[1][1].seed != 7 and 0 <= parts[1][1].seed < 2**63
    assert split([_job(8)], share=4)[1][1].seed == parts[1][1].seed  # the same every time


def _completion(job: GenerationJob) -> Completion:
    choices = [ChoiceText(None, [], ()) for _ in range(job.n)]  # type: ignore[arg-type]
    for i, c in enumerate(choices):
        c.text = str(job.first_index + i)
    return Completion(len(job.prompt), choices)


def test_a_request_holds_at_most_its_share_and_gets_every_choice_in_order():
    held, most = [0], [0]

    async def submit(job: GenerationJob) -> Completion:
        held[0] += job.n
        most[0] = max(most[0], held[0])
        await asyncio.sleep(0.01 * job.n)
        held[0] -= job.n
        return _completion(job)

    parts = split([_job(8), _job(5, first_index=8)], share=3)
    out = asyncio.run(run_shared(parts, 2, 3, submit))
    assert most[0] == 3
    assert [c.text for c in out[0].choices] == [str(i) for i in range(8)]
    assert [c.text for c in out[1].choices] == [str(i) for i in range(8, 13)]
    assert out[0].prompt_tokens == 3


def test_an_error_cancels_the_parts_still_running():
    cancelled: list[int] = []

    async def submit(job: GenerationJob) -> Completion:
        try:
            if job.first_index == 1:
                raise ValueError("boom")
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.append(job.first_index)
            raise
        return _completion(job)

    async def go() -> None:
        with pytest.raises(ValueError, match="boom"):
            await run_shared(split([_job(3)], share=1), 1, 2, submit)
        assert not [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]

    asyncio.run(go())
    assert cancelled == [0]  # the part beside the failed one; the third never started
