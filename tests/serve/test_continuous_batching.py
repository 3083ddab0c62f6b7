"""Continuous batching: requests join a running generation batch and get what they get alone.

A tiny random rotary decoder (weights scaled up so that greedy continuations
vary from token to token: a mask that let one row see another's keys changes
them) with the ChatML test tokenizer.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import torch
from chat_helpers import chatml_tokenizer
from fastapi.testclient import TestClient

from attnkit.checkpoints import save_checkpoint
from attnkit.checkpoints.loading import load_model
from attnkit.models.decoder_only import DecoderOnlyLM
from attnkit.models.lm_config import DecoderOnlyConfig
from attnkit.serve.app import ServeSettings, create_app
from attnkit.serve.batcher import Admitted, DynamicBatcher
from attnkit.serve.completion import Completion, generate_choices
from attnkit.serve.continuous import ContinuousGenerator, GenerationJob, supports
from attnkit.serve.handles import CLIENT_GONE, RequestCancelled, RequestHandle
from attnkit.serve.model_host import ModelHost

PROMPTS = ["What is the capital", "Paris", "user assistant France capital of What is", "Wh",
           "capital capital"]  # fmt: skip


@pytest.fixture(scope="module")
def rotary_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    tok = chatml_tokenizer()
    config = DecoderOnlyConfig.from_preset(
        "small", d_model=32, num_heads=4, num_kv_heads=2, d_ff=64, num_layers=2, max_len=128,
        vocab_size=tok.vocab_size, pad_id=0, bos_id=1, eos_id=2, dropout=0.0, positions="rotary",
    )  # fmt: skip
    model = DecoderOnlyLM(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" not in name:
                p.mul_(4.0)
    out = tmp_path_factory.mktemp("continuous") / "rotary"
    save_checkpoint(out, model_state=model.state_dict(), config=config.to_dict(),
                    tokenizer_json=tok.to_json())  # fmt: skip
    return out


@pytest.fixture(scope="module")
def engine(rotary_run: Path) -> ModelHost:
    return ModelHost(load_model(rotary_run))


def _alone(engine: ModelHost, job: GenerationJob) -> Completion:
    return generate_choices(
        engine, job.prompt, n=job.n, max_tokens=job.max_tokens, temperature=job.temperature,
        top_p=job.top_p, seed=job.seed,
    )  # fmt: skip


def _run(engine: ModelHost, jobs: list[GenerationJob], join_every: int,
         at_take: Callable[[int], None] = lambda n: None,
         handles: list[RequestHandle] | None = None) -> dict[int, Any]:  # fmt: skip
    """Run ``jobs[0]``, the others joining one every ``join_every`` steps when they fit
    (``take`` is called once per step); ``{job: (value, error)}``."""
    results: dict[int, Any] = {}
    handles = handles or [RequestHandle() for _ in jobs]
    queue = list(range(1, len(jobs)))
    calls = [0]

    def admitted(i: int) -> Admitted:
        return Admitted(jobs[i], handles[i], lambda v, e: results.__setitem__(i, (v, e)))

    def take(fits: Callable[[Any], bool]) -> Admitted | None:
        calls[0] += 1
        at_take(calls[0])
        if calls[0] % join_every == 0 and queue and fits(jobs[queue[0]]):
            return admitted(queue.pop(0))
        return None

    ContinuousGenerator(engine, max_rows=16)(admitted(0), take)
    assert not queue, "a request never joined"
    return results


def test_requests_joining_the_running_batch_get_what_they_get_alone(engine):
    assert supports(engine)
    tok = engine.tokenizer
    jobs = [GenerationJob(tok.encode(p), n, 24, 0.0, 1.0, 0) for p, n in
            zip(PROMPTS, (1, 2, 1, 3, 1), strict=True)]  # fmt: skip
    jobs.append(GenerationJob(tok.encode("Paris France"), 2, 12, 1.0, 0.9, 5))  # sampled, seeded
    jobs.append(GenerationJob(tok.encode("France"), 1, 4, 0.0, 1.0, 0, stops=["no"]))
    results = _run(engine, jobs, join_every=3)
    texts = set()
    for i, job in enumerate(jobs):
        got, error = results[i]
        assert error is None
        alone = _alone(engine, job)
        assert [c.ids for c in got.choices] == [c.ids for c in alone.choices], i
        assert [c.openai_reason for c in got.choices] == [c.openai_reason for c in alone.choices]
        assert got.completion_tokens == alone.completion_tokens
        texts |= {c.text for c in got.choices}
    assert len(texts) > 5  # the continuations differ: a test that can see rows mix


def test_a_cancelled_request_leaves_and_the_others_go_on(engine):
    tok = engine.tokenizer
    jobs = [GenerationJob(tok.encode(p), 1, 30, 0.0, 1.0, 0) for p in PROMPTS[:3]]
    handles = [RequestHandle() for _ in jobs]

    def cancel_first(n: int) -> None:
        if n == 10:
            handles[0].cancel(CLIENT_GONE)

    results = _run(engine, jobs, join_every=2, at_take=cancel_first, handles=handles)
    value, error = results[0]
    assert value is None and isinstance(error, RequestCancelled)
    for i in (1, 2):
        got, error = results[i]
        assert error is None and got.choices[0].ids == _alone(engine, jobs[i]).choices[0].ids


def test_a_batch_that_never_empties_attends_only_over_its_live_rows(engine, monkeypatch):
    """Twelve requests, one joining every 11 steps, each 20 tokens: 141 steps in one batch
    on a model of 128 positions. As rows leave, the columns before the oldest live row
    are dropped (rotary keys turned back), so the shared position stays near the live
    rows' length, every request still joins, and each gets its tokens alone."""
    tok = engine.tokenizer
    jobs = [GenerationJob(tok.encode(PROMPTS[i % len(PROMPTS)]), 1 + i % 2, 20, 0.0, 1.0, 0,
                          until_eos=False) for i in range(12)]  # fmt: skip
    seen: list[tuple[int, int]] = []  # (cache, position) of each one-token decode
    inner = engine.model.decode

    def decode(ids: torch.Tensor, cache: Any) -> Any:
        if ids.size(1) == 1:
            seen.append((id(cache), int(cache.pos)))
        return inner(ids, cache)

    monkeypatch.setattr(engine.model, "decode", decode)
    results = _run(engine, jobs, join_every=12)  # a join takes one more call: every 11 steps
    monkeypatch.undo()
    for i, job in enumerate(jobs):  # /v1/generate's jobs: 20 tokens each, EOS or not
        got, error = results[i]
        alone = engine.generate(job.prompt, max_new_tokens=20, temperature=0.0, top_k=0,
                                top_p=1.0, seed=0)  # fmt: skip
        assert error is None and [c.ids for c in got.choices] == [alone] * job.n, i
    batch = Counter(c for c, _ in seen).most_common(1)[0][0]  # the running batch's cache
    positions = [p for c, p in seen if c == batch]
    assert len(positions) >= 140 > engine.max_len  # more steps than the model's positions
    assert max(positions) < 48, max(positions)  # the live rows' span, not the batch's history


def test_a_prompt_longer_than_the_batch_so_far_joins_at_once(engine):
    """The batch's positions move right to make room for it (rotary keys turned with them)."""
    tok = engine.tokenizer
    jobs = [GenerationJob(tok.encode("Wh"), 1, 16, 0.0, 1.0, 0),
            GenerationJob(tok.encode(PROMPTS[2]), 2, 16, 1.0, 0.9, 3)]  # fmt: skip
    assert len(jobs[1].prompt) > len(jobs[0].prompt) + 3
    results: dict[int, Any] = {}
    offered = [1]

    def admitted(i: int) -> Admitted:
        return Admitted(jobs[i], RequestHandle(), lambda v, e: results.__setitem__(i, (v, e)))

    def take(fits: Callable[[Any], bool]) -> Admitted | None:
        if offered and fits(jobs[offered[0]]):  # offered once: before the first step
            return admitted(offered.pop())
        offered.clear()
        return None

    ContinuousGenerator(engine, max_rows=4)(admitted(0), take)
    assert set(results) == {0, 1}, "the longer prompt did not join"
    for i, job in enumerate(jobs):
        got, error = results[i]
        assert error is None
        assert [c.ids for c in got.choices] == [c.ids for c in _alone(engine, job).choices], i


@pytest.fixture(scope="module")
def http(rotary_run: Path) -> Iterator[TestClient]:
    app = create_app(ModelHost(load_model(rotary_run)), ServeSettings(threads=1, max_new_tokens=64))
    with TestClient(app) as c:
        yield c


def test_concurrent_clients_share_the_batch_and_get_their_own_answers(http):
    client = openai.OpenAI(base_url="http://testserver/v1", api_key="unused", http_client=http)
    answers: dict[int, str] = {}

    def ask(i: int) -> None:
        r = client.completions.create(model="m", prompt=PROMPTS[i % len(PROMPTS)], max_tokens=48,
                                      temperature=0)  # fmt: skip
        answers[i] = r.choices[0].text

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    engine: ModelHost = http.app.app.state.engine  # type: ignore[attr-defined]
    for i, text in answers.items():
        job = GenerationJob(engine.tokenizer.encode(PROMPTS[i % len(PROMPTS)]), 1, 48, 0.0, 1.0, 0)
        assert text == _alone(engine, job).choices[0].text, i
    assert len(answers) == 8
    stats = http.get("/v1/health").json()["batcher"]
    assert stats["largest_batch"] >= 2, stats  # requests did run together


def test_the_batcher_hands_joining_items_in_order_and_never_lets_them_overtake():
    """A fake runner: items of its key join while they fit and are answered as each is done;
    an item of another key ahead in the queue (or one that does not fit) stops the joining."""
    go = threading.Event()
    runs: list[list[str]] = []

    def runner(first: Admitted, take: Callable[[Callable[[Any], bool]], Admitted | None]) -> None:
        go.wait(10)
        held = [first]
        while (more := take(lambda p: p != "too big")) is not None:
            held.append(more)
        runs.append([a.payload for a in held])
        for a in held:  # each answered on its own
            a.finish(a.payload.upper(), None)

    batcher = DynamicBatcher(lambda key, payloads, handles: [f"batch {p}" for p in payloads],
                             max_wait_ms=0, continuous={"g": runner})  # fmt: skip
    batcher.start()

    async def scenario() -> list[Any]:
        first = asyncio.ensure_future(batcher.submit("g", "a", cost=1))
        while batcher.pending():
            await asyncio.sleep(0.001)
        names = [("g", "b"), ("g", "c"), ("t", "x"), ("g", "d"), ("g", "too big"), ("g", "e")]
        rest = [asyncio.ensure_future(batcher.submit(k, p, cost=1)) for k, p in names]
        while batcher.pending() < len(names):
            await asyncio.sleep(0.001)
        go.set()
        return [r for r, _ in await asyncio.gather(first, *rest)]

    try:
        results = asyncio.run(scenario())
    finally:
        batcher.stop()
    assert results == ["A", "B", "C", "batch x", "D", "TOO BIG", "E"]
    assert runs == [["a", "b", "c"], ["d"], ["too big", "e"]]
    assert batcher.stats.largest_batch == 3


# -- /v1/generate: attnkit's own route through the same running batch ------------------


class _Gate:
    """Holds the model worker before each ``model.decode`` while ``open`` is clear (10 s at
    most: never hangs), so a test can queue requests while one is running."""

    def __init__(self, model: Any) -> None:
        self.open = threading.Event()
        inner = model.decode

        def decode(*args: Any, **kwargs: Any) -> Any:
            self.open.wait(10)
            return inner(*args, **kwargs)

        self.decode = decode


def _until(condition: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting: {what}"
        time.sleep(0.001)


def _alone_generate(engine: ModelHost, body: dict[str, Any]) -> str:
    """``full_text`` of ``body`` decoded alone, the way /v1/generate decoded it before."""
    prompt = engine.encode_prompt(body["prompt"])
    new = engine.generate(
        prompt, max_new_tokens=body["max_new_tokens"], temperature=body.get("temperature", 1.0),
        top_k=min(body.get("top_k", 0), engine.vocab_rows), top_p=body.get("top_p", 1.0),
        seed=body.get("seed", 0),
    )  # fmt: skip
    return str(engine.tokenizer.decode([*prompt, *new]))


@pytest.fixture
def two_rows(rotary_run: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """An app with 2 generation rows, its worker behind a ``_Gate``; the request handles
    that reach the batcher are in ``app.handles``."""
    engine = ModelHost(load_model(rotary_run))
    app = create_app(engine, ServeSettings(threads=1, max_new_tokens=64, max_generation_rows=2))
    batcher = app.app.state.batcher  # type: ignore[attr-defined]
    gate = _Gate(engine.model)
    monkeypatch.setattr(engine.model, "decode", gate.decode)
    handles: list[RequestHandle] = []
    submit = batcher.submit

    async def spy(key: Any, payload: Any, **kw: Any) -> Any:
        handles.append(kw["handle"])
        return await submit(key, payload, **kw)

    monkeypatch.setattr(batcher, "submit", spy)
    with TestClient(app) as client:
        client.gate, client.handles, client.batcher = gate, handles, batcher  # type: ignore[attr-defined]
        yield client
        gate.open.set()


def _post(
    client: TestClient, body: dict[str, Any], out: dict[str, Any], name: str
) -> threading.Thread:
    def go() -> None:
        r = client.post("/v1/generate", json=body)
        out[name] = (r.status_code, r.json())

    thread = threading.Thread(target=go)
    thread.start()
    return thread


def test_generate_requests_join_the_running_batch_and_get_what_they_get_alone(two_rows):
    gate, batcher = two_rows.gate, two_rows.batcher
    engine: ModelHost = two_rows.app.app.state.engine
    first = {"prompt": PROMPTS[2], "max_new_tokens": 40, "temperature": 0.0}
    joining = {"prompt": PROMPTS[1], "max_new_tokens": 12, "temperature": 0.9, "top_k": 5,
               "seed": 7}  # fmt: skip
    out: dict[str, Any] = {}
    threads = [_post(two_rows, first, out, "first")]
    _until(lambda: len(two_rows.handles) == 1 and batcher.pending() == 0, "the first running")
    threads.append(_post(two_rows, joining, out, "joining"))
    _until(lambda: batcher.pending() == 1, "the second queued")
    gate.open.set()  # the first is mid-batch (held before a decode): the second joins it
    for t in threads:
        t.join(60)
    for name, body in (("first", first), ("joining", joining)):
        status, answer = out[name]
        assert status == 200, answer
        assert answer["new_tokens"] == body["max_new_tokens"]
        assert answer["full_text"] == _alone_generate(engine, body), name
    assert out["joining"][1]["timing"]["batch_requests"] == 2  # it ran beside the first
    assert batcher.stats.batches == 1 and batcher.stats.largest_batch == 2


def test_a_cancelled_generate_request_frees_its_row_for_a_waiting_one(two_rows):
    gate, batcher, handles = two_rows.gate, two_rows.batcher, two_rows.handles
    engine: ModelHost = two_rows.app.app.state.engine
    bodies = {
        "cancelled": {"prompt": PROMPTS[2], "max_new_tokens": 64, "temperature": 0.0},
        "long": {"prompt": PROMPTS[0], "max_new_tokens": 64, "temperature": 0.0},
        "waiting": {"prompt": PROMPTS[1], "max_new_tokens": 8, "temperature": 0.0},
    }
    out: dict[str, Any] = {}
    threads = [_post(two_rows, bodies["cancelled"], out, "cancelled")]
    _until(lambda: len(handles) == 1 and batcher.pending() == 0, "the first running")
    threads.append(_post(two_rows, bodies["long"], out, "long"))
    _until(lambda: batcher.pending() == 1, "the second queued")
    gate.open.set()
    _until(lambda: batcher.pending() == 0, "the second joining")
    gate.open.clear()  # both rows taken: the third waits in the queue
    threads.append(_post(two_rows, bodies["waiting"], out, "waiting"))
    _until(lambda: batcher.pending() == 1, "the third queued")
    assert "long" not in out and "cancelled" not in out, out
    handles[0].cancel(CLIENT_GONE)
    gate.open.set()
    for t in threads:
        t.join(60)
    assert out["cancelled"][0] == 499
    for name in ("long", "waiting"):
        status, answer = out[name]
        assert status == 200 and answer["full_text"] == _alone_generate(engine, bodies[name])
    # The third joined the running batch in the cancelled one's row, beside the long one.
    assert out["waiting"][1]["timing"]["batch_requests"] == 2
    assert batcher.stats.batches == 1 and batcher.stats.cancelled_running == 1
