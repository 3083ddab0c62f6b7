"""Dynamic batching: grouping rules on a fake model, then concurrent requests on a real one."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Hashable
from typing import Any

import httpx
import pytest

from attnkit.checkpoints.loading import load_model
from attnkit.serve.app import ServeSettings, create_app
from attnkit.serve.batcher import BatcherClosed, DynamicBatcher
from attnkit.serve.handles import CLIENT_GONE, RequestCancelled, RequestHandle
from attnkit.serve.model_host import ModelHost


class FakeModel:
    """Records each batch; ``gate`` holds the worker until the test has queued everything."""

    def __init__(self) -> None:
        self.batches: list[tuple[Hashable, list[Any]]] = []
        self.gate = threading.Event()
        self.gate.set()

    def __call__(self, key: Hashable, payloads: list[Any], handles: list[Any]) -> list[Any]:
        self.gate.wait(10)
        self.batches.append((key, list(payloads)))
        if any(p == "boom" for p in payloads):
            raise RuntimeError("boom")
        return [(key, p) for p in payloads]


async def _blocker(batcher: DynamicBatcher, fake: FakeModel) -> asyncio.Task[Any]:
    """Occupy the worker with one batch that waits for ``fake.gate``."""
    fake.gate.clear()
    task = asyncio.ensure_future(batcher.submit("block", "first", cost=1))
    while batcher.pending():  # the worker has taken it
        await asyncio.sleep(0.001)
    await asyncio.sleep(0.02)
    return task


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_compatible_requests_share_a_batch_and_keys_never_mix():
    fake = FakeModel()
    batcher = DynamicBatcher(fake, max_tokens=1000, max_wait_ms=1)
    batcher.start()

    async def go() -> list[Any]:
        blocked = await _blocker(batcher, fake)
        keys = ["a", "b", "a", "c", "b", "a"] * 3
        tasks = [batcher.submit(k, f"{k}{i}", cost=10) for i, k in enumerate(keys)]
        fake.gate.set()
        return [await blocked, *await asyncio.gather(*tasks)]

    results = _run(go())
    batcher.stop()
    for (key, payload), _ in results[1:]:
        assert payload.startswith(key)  # each request got its own result
    sizes = {key: [len(p) for k, p in fake.batches if k == key] for key in "abc"}
    assert sizes == {"a": [9], "b": [6], "c": [3]}  # one batch per key, in arrival order
    assert [k for k, _ in fake.batches] == ["block", "a", "b", "c"]
    assert all(p[0] == k for k, ps in fake.batches[1:] for p in ps)
    infos = [info for _, info in results[1:]]
    assert {i.batch_requests for i in infos} == {9, 6, 3}


def test_token_budget_and_sentence_cap_split_batches_in_order():
    fake = FakeModel()
    batcher = DynamicBatcher(fake, max_tokens=100, max_wait_ms=1, max_sentences=5)
    batcher.start()

    async def go() -> None:
        blocked = await _blocker(batcher, fake)
        tasks = [batcher.submit("k", i, cost=30) for i in range(7)]  # 3 fit in 100
        tasks += [batcher.submit("k", 100 + i, cost=1, sentences=2) for i in range(3)]
        tasks.append(batcher.submit("k", "big", cost=500))  # over the budget: runs alone
        fake.gate.set()
        await asyncio.gather(blocked, *tasks)

    _run(go())
    batcher.stop()
    got = [p for k, p in fake.batches[1:]]
    assert got == [[0, 1, 2], [3, 4, 5], [6, 100, 101], [102], ["big"]]


def test_a_lone_request_waits_at_most_max_wait():
    fake = FakeModel()
    batcher = DynamicBatcher(fake, max_tokens=100, max_wait_ms=50)
    batcher.start()
    start = time.monotonic()
    (_, info) = _run(batcher.submit("k", 1, cost=1))
    elapsed = time.monotonic() - start
    batcher.stop()
    assert 0.045 <= info.queue_ms / 1000 and elapsed < 2.0
    assert info.batch_requests == 1


def test_an_error_fails_its_batch_only_and_the_worker_goes_on():
    fake = FakeModel()
    batcher = DynamicBatcher(fake, max_tokens=100, max_wait_ms=1)
    batcher.start()

    async def go() -> list[Any]:
        blocked = await _blocker(batcher, fake)
        bad = [batcher.submit("k", "boom", cost=1), batcher.submit("k", "fine", cost=1)]
        other = batcher.submit("j", "fine", cost=1)
        fake.gate.set()
        return await asyncio.gather(blocked, *bad, other, return_exceptions=True)

    _, boom, fine_same_batch, other = _run(go())
    assert isinstance(boom, RuntimeError) and isinstance(fine_same_batch, RuntimeError)
    assert other[0] == ("j", "fine")
    assert _run(batcher.submit("k", "later", cost=1))[0] == ("k", "later")
    batcher.stop()


def test_jobs_run_in_the_worker_thread_and_cancelled_requests_are_dropped():
    fake = FakeModel()
    batcher = DynamicBatcher(fake, max_tokens=100, max_wait_ms=1)
    batcher.start()

    async def go() -> Any:
        blocked = await _blocker(batcher, fake)
        gone = asyncio.ensure_future(batcher.submit("k", "gone", cost=1))
        await asyncio.sleep(0.01)
        gone.cancel()
        kept = batcher.submit("k", "kept", cost=1)
        job = batcher.call(lambda: threading.current_thread().name)
        fake.gate.set()
        return await asyncio.gather(blocked, kept, job)

    _, kept, (thread_name, _) = _run(go())
    batcher.stop()
    assert kept[0] == ("k", "kept") and thread_name == "attnkit-model"
    assert all("gone" not in ps for _, ps in fake.batches)


def test_stop_cancels_what_is_queued_and_what_is_running():
    fake = FakeModel()
    batcher = DynamicBatcher(fake, max_tokens=100, max_wait_ms=1)
    batcher.start()

    async def go() -> list[Any]:
        blocked = await _blocker(batcher, fake)
        queued = asyncio.ensure_future(batcher.submit("k", 1, cost=1))
        await asyncio.sleep(0.01)
        batcher.close()  # what the server does as shutdown begins (in the event loop)
        # Both are answered while the model is still busy (the fake ignores its handles).
        both = asyncio.gather(blocked, queued, return_exceptions=True)
        answers = await asyncio.wait_for(both, 2)
        fake.gate.set()
        return answers

    answers = _run(go())
    batcher.stop()
    for answer in answers:
        assert isinstance(answer, RequestCancelled) and answer.status == 503
        assert "shutting down" in str(answer)
    assert [k for k, _ in fake.batches] == ["block"]  # the queued one never ran
    with pytest.raises(BatcherClosed):
        _run(batcher.submit("k", 2, cost=1))


def test_a_cancelled_request_is_answered_at_once_and_never_runs():
    fake = FakeModel()
    batcher = DynamicBatcher(fake, max_tokens=100, max_wait_ms=1)
    batcher.start()

    async def go() -> list[Any]:
        blocked = await _blocker(batcher, fake)
        gone_handle = RequestHandle()
        gone = asyncio.ensure_future(batcher.submit("k", "gone", cost=1, handle=gone_handle))
        kept = asyncio.ensure_future(batcher.submit("k", "kept", cost=1))
        await asyncio.sleep(0.01)
        gone_handle.cancel(CLIENT_GONE)  # what the disconnect watcher does
        answer = await asyncio.wait_for(asyncio.gather(gone, return_exceptions=True), 2)
        fake.gate.set()  # the worker is still busy until now
        return [*answer, await kept, await blocked]

    gone, kept, _ = _run(go())
    batcher.stop()
    assert isinstance(gone, RequestCancelled) and gone.status == 499
    assert kept[0] == ("k", "kept")
    assert all("gone" not in ps for _, ps in fake.batches)
    assert batcher.stats.dropped_queued == 1


def test_the_deadline_answers_a_queued_request_while_the_worker_is_busy():
    fake = FakeModel()
    batcher = DynamicBatcher(fake, max_tokens=100, max_wait_ms=1)
    batcher.start()

    async def go() -> tuple[Any, float]:
        blocked = await _blocker(batcher, fake)
        start = time.monotonic()
        late = batcher.submit("k", "late", cost=1, handle=RequestHandle(timeout=0.2))
        answer = await asyncio.wait_for(asyncio.gather(late, return_exceptions=True), 5)
        waited = time.monotonic() - start
        fake.gate.set()
        await blocked
        return answer[0], waited

    late, waited = _run(go())
    batcher.stop()
    assert isinstance(late, RequestCancelled) and late.status == 503
    assert "time budget of 0.2 s" in str(late)
    assert 0.2 <= waited < 3.0
    assert all("late" not in ps for _, ps in fake.batches)


def test_a_request_cancelled_while_its_batch_runs_gets_its_reason_and_the_rest_their_results():
    seen_handles: list[RequestHandle] = []

    def run_batch(key: Hashable, payloads: list[Any], handles: list[Any]) -> list[Any]:
        seen_handles.extend(handles)
        handles[1].cancel(CLIENT_GONE)  # the second client leaves mid-batch
        return [f"result {p}" for p in payloads]

    batcher = DynamicBatcher(run_batch, max_tokens=100, max_wait_ms=50)
    batcher.start()

    async def go() -> list[Any]:
        tasks = [batcher.submit("k", i, cost=1, handle=RequestHandle()) for i in range(3)]
        return await asyncio.gather(*tasks, return_exceptions=True)

    first, second, third = _run(go())
    batcher.stop()
    assert len(seen_handles) == 3  # one batch, each payload with its request's handle
    assert first[0] == "result 0" and third[0] == "result 2"
    assert isinstance(second, RequestCancelled) and second.status == 499
    assert batcher.stats.cancelled_running == 1


def test_two_workers_run_two_batches_at_once_and_jobs_one_at_a_time():
    """``workers=2``: a batch forms and runs while another is running (each batch
    waits at a two-party barrier that only a second, concurrent batch can pass;
    one worker would time out there), while plain jobs never overlap."""
    barrier = threading.Barrier(2, timeout=5)
    seen: list[tuple[str, list[Any]]] = []

    def run_batch(key: Hashable, payloads: list[Any], handles: list[Any]) -> list[Any]:
        barrier.wait()
        seen.append((threading.current_thread().name, list(payloads)))
        return list(payloads)

    batcher = DynamicBatcher(run_batch, max_tokens=100, max_wait_ms=1, workers=2)
    batcher.start()
    inside, overlaps = [0], []

    def job() -> int:
        inside[0] += 1
        overlaps.append(inside[0])
        time.sleep(0.02)
        inside[0] -= 1
        return 1

    async def go() -> Any:
        first = asyncio.ensure_future(batcher.submit("k", "a", cost=1))
        while batcher.pending():  # a worker holds "a" at the barrier
            await asyncio.sleep(0.001)
        await asyncio.sleep(0.02)  # past "a"'s max_wait: its batch has formed
        second = batcher.submit("k", "b", cost=1)  # only the other worker can take it
        jobs = [batcher.call(job) for _ in range(4)]
        return await asyncio.gather(first, second, *jobs)

    results = _run(go())
    batcher.stop()
    assert [r[0] for r in results[:2]] == ["a", "b"]
    assert sorted(p for _, ps in seen for p in ps) == ["a", "b"]
    assert {name for name, _ in seen} == {"attnkit-model", "attnkit-model-1"}
    assert overlaps == [1, 1, 1, 1]  # never two jobs inside at once
    assert batcher.stats.batches == 2 and batcher.stats.jobs == 4


def test_stop_with_two_workers_cancels_both_running_batches():
    fake = FakeModel()
    fake.gate.clear()
    batcher = DynamicBatcher(fake, max_tokens=1, max_wait_ms=0, workers=2)
    batcher.start()

    async def go() -> list[Any]:
        running = [asyncio.ensure_future(batcher.submit("k", i, cost=1)) for i in range(2)]
        while batcher.pending():
            await asyncio.sleep(0.001)
        await asyncio.sleep(0.02)
        batcher.close()
        answers = await asyncio.wait_for(asyncio.gather(*running, return_exceptions=True), 2)
        fake.gate.set()
        return answers

    answers = _run(go())
    threads = list(batcher._threads)
    batcher.stop()
    assert all(isinstance(a, RequestCancelled) and a.status == 503 for a in answers)
    assert len(threads) == 2 and not any(t.is_alive() for t in threads)


def test_bad_knobs_name_the_field():
    bad = [({"max_tokens": 0}, "max_tokens"), ({"max_wait_ms": -1}, "max_wait_ms"),
           ({"max_sentences": 0}, "max_sentences"), ({"workers": 0}, "workers")]  # fmt: skip
    for kwargs, field in bad:
        with pytest.raises(ValueError, match=field):
            DynamicBatcher(FakeModel(), **kwargs)


# -- the real model: concurrent requests give what decoding each alone gives ----------------

WORDS = ["one", "two", "forty", "seven", "hundred", "thousand", "nine", "twelve", "eighty"]


def _requests(n: int, seed: int = 0) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    settings = [(1, 0.6, 1), (2, 0.6, 1), (2, 0.6, 2), (3, 1.0, 1), (3, 0.6, 3)]
    out = []
    for _ in range(n):
        beam, alpha, nbest = rng.choice(settings)
        texts = [" ".join(rng.choices(WORDS, k=rng.randint(1, 4)))
                 for _ in range(rng.randint(1, 3))]  # fmt: skip
        out.append({"text": texts, "beam": beam, "alpha": alpha, "nbest": nbest})
    return out


def test_concurrent_requests_equal_decoding_each_alone(checkpoint):
    engine = ModelHost(load_model(checkpoint("transformer")))
    app = create_app(engine, ServeSettings(max_wait_ms=20, max_batch_tokens=4000))
    fastapi_app = app.app
    batcher: DynamicBatcher = fastapi_app.state.batcher
    seen: list[tuple[Hashable, int]] = []
    run_batch = batcher.run_batch

    def spy(key: Hashable, payloads: list[Any], handles: list[Any]) -> Any:
        seen.append((key, len(payloads)))
        return run_batch(key, payloads, handles)

    batcher.run_batch = spy
    requests = _requests(30)

    async def go() -> list[Any]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            answers = await asyncio.gather(*(client.post("/v1/translate", json=r)
                                             for r in requests))  # fmt: skip
        return [a.json() for a in answers]

    batcher.start()
    try:
        answers = _run(go())
    finally:
        batcher.stop()
    assert max(n for _, n in seen) > 1, f"nothing was batched: {seen}"
    assert len(seen) < len(requests)
    for req, ans in zip(requests, answers):
        sources = engine.encode_sources(req["text"])
        alone = engine.translate(sources, beam=req["beam"], alpha=req["alpha"], nbest=req["nbest"])
        expected = [engine.result_json(r, req["nbest"]) for r in alone]
        assert ans["translations"] == [e["translation"] for e in expected]
        assert [[h["text"] for h in hs] for hs in ans["nbest"]] == [
            [h["text"] for h in e["nbest"]] for e in expected
        ]
        assert ans["scores"] == pytest.approx([e["score"] for e in expected], abs=1e-4)
