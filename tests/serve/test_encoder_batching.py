"""Fill-mask and classification in dynamic batches: concurrent requests share one padded
pass and each gets what it gets alone.

A tiny random encoder-only classifier (MLM head and a 3-label head, segment
embeddings) with a character tokenizer (``conftest.encoder_checkpoint``); the
model worker is held behind a gate so that the requests are queued together,
then batched.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from fastapi.testclient import TestClient

from attnkit.checkpoints.loading import load_model
from attnkit.serve.app import ServeSettings, create_app
from attnkit.serve.encoder_batch import ClassifyJob, classify, encode_examples
from attnkit.serve.handles import CLIENT_GONE, RequestCancelled, RequestHandle
from attnkit.serve.model_host import MaskJob, ModelHost

MASKED = ["the [MASK]og sat", "a[MASK] on the [MASK]at", "[MASK]", "the dog sat on the log [MASK]"]
TEXTS = ["the cat sat", "a dog", "on the mat on the log the dog sat", "t"]
PAIRS = [None, ["the log", "no", "a", "cat dog cat"]]


@pytest.fixture(scope="module")
def classifier_run(encoder_checkpoint: Callable[[int], Path]) -> Path:
    return encoder_checkpoint(3)


@pytest.fixture
def served(classifier_run: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The app in process; ``served.gate`` (set: open) holds the worker before each pass,
    ``served.rows`` records the rows of each pass."""
    engine = ModelHost(load_model(classifier_run))
    gate, rows = threading.Event(), []
    gate.set()
    inner = engine.model.forward

    def forward(ids: torch.Tensor, **kw: Any) -> Any:
        gate.wait(10)
        rows.append(ids.size(0))
        return inner(ids, **kw)

    monkeypatch.setattr(engine.model, "forward", forward)
    app = create_app(engine, ServeSettings(threads=1, max_wait_ms=0))
    with TestClient(app) as client:
        client.gate, client.rows = gate, rows  # type: ignore[attr-defined]
        client.batcher = app.app.state.batcher  # type: ignore[attr-defined]
        yield client
        gate.set()


def _until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 20
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting: {what}"
        time.sleep(0.001)


def _requests() -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = []
    for k, text in enumerate(MASKED):
        out.append(("/v1/fill-mask", {"text": text, "top_k": 2 + k}))
    out.append(("/v1/classify", {"text": TEXTS}))
    out.append(("/v1/classify", {"text": TEXTS[:2], "text_pair": PAIRS[1][:2]}))
    out.append(("/v1/classify", {"text": [TEXTS[2]]}))
    out.append(("/v1/classify", {"text": TEXTS[1:], "text_pair": PAIRS[1][1:]}))
    return out


def _same(batched: Any, alone: Any, path: str) -> None:
    """Equal answers (probabilities within 1e-5), ``timing`` aside."""
    if isinstance(alone, dict):
        assert set(batched) == set(alone), path
        for key in alone:
            if key != "timing":
                _same(batched[key], alone[key], path)
    elif isinstance(alone, list):
        assert len(batched) == len(alone), path
        for b, a in zip(batched, alone, strict=True):
            _same(b, a, path)
    elif isinstance(alone, float):
        assert abs(batched - alone) <= 1e-5, (path, batched, alone)
    else:
        assert batched == alone, path


def test_concurrent_fill_mask_and_classify_requests_are_batched_and_answer_as_alone(served):
    requests = _requests()
    alone = []
    for path, body in requests:
        r = served.post(path, json=body)
        assert r.status_code == 200, r.text
        assert r.json()["timing"]["batch_requests"] == 1
        alone.append(r.json())
    assert served.rows == [1, 1, 1, 1, 4, 2, 1, 3]  # one pass per request: the texts' rows

    answers: dict[int, Any] = {}

    def post(i: int) -> None:
        r = served.post(requests[i][0], json=requests[i][1])
        answers[i] = (r.status_code, r.json())

    served.gate.clear()
    served.rows.clear()
    blocker = threading.Thread(target=post, args=(0,))  # the worker takes it, then waits
    blocker.start()
    _until(lambda: served.batcher.pending() == 0 and served.batcher.stats.batches > 8, "first")
    threads = [threading.Thread(target=post, args=(i,)) for i in range(1, len(requests))]
    for t in threads:
        t.start()
    _until(lambda: served.batcher.pending() == len(requests) - 1, "the others queued")
    served.gate.set()
    for t in [blocker, *threads]:
        t.join(60)
    for i, (status, answer) in answers.items():
        assert status == 200, answer
        _same(answer, alone[i], requests[i][0])
    sizes = [answers[i][1]["timing"]["batch_requests"] for i in range(len(requests))]
    assert sizes == [1, 3, 3, 3, 4, 4, 4, 4]  # fill-mask 1 then 3 together; classify 4
    assert [answers[i][1]["timing"]["batch_sentences"] for i in (4, 5, 6, 7)] == [10] * 4
    assert sorted(served.rows) == [1, 3, 10]  # three passes: one per batch
    assert served.batcher.stats.largest_batch == 4


def test_cancelled_requests_are_left_out_of_the_pass(classifier_run: Path):
    engine = ModelHost(load_model(classifier_run))
    rows: list[int] = []
    inner = engine.model.forward
    engine.model.forward = lambda ids, **kw: (rows.append(ids.size(0)), inner(ids, **kw))[1]
    masked = [MaskJob(engine.encode_masked(t, "[MASK]"), 3) for t in MASKED[:3]]
    handles = [RequestHandle() for _ in masked]
    alone = engine.fill_masks(masked)
    handles[1].cancel(CLIENT_GONE)
    got = engine.fill_masks(masked, handles)
    assert got[1] is None and rows[-1] == 2  # its row was never computed
    for i in (0, 2):
        _same(list(got[i]), list(alone[i]), "fill-mask")
    jobs: list[ClassifyJob] = [encode_examples(engine, TEXTS[:2], None),
                               encode_examples(engine, TEXTS[2:], PAIRS[1][2:])]  # fmt: skip
    both = classify(engine, jobs)
    cut = [RequestHandle(), RequestHandle()]
    cut[0].cancel(CLIENT_GONE)
    got_c = classify(engine, jobs, cut)
    assert got_c[0] is None and rows[-1] == 2
    _same(got_c[1], both[1], "classify")
    cut[1].cancel(CLIENT_GONE)
    before = len(rows)
    with pytest.raises(RequestCancelled):  # all gone: the model is not run at all
        classify(engine, jobs, cut)
    assert len(rows) == before


def test_classify_errors(served, encoder_checkpoint: Callable[[int], Path]):
    r = served.post("/v1/classify", json={"text": ["a"], "text_pair": ["b", "c"]})
    assert r.status_code == 422 and r.json() == {"error": "text_pair: 2 texts for 1 in text"}
    r = served.post("/v1/classify", json={"text": ["the cat sat " * 5]})
    assert r.status_code == 422 and r.json()["error"] == (
        "text[0]: 62 tokens; the model reads at most 48"
    )
    r = served.post("/v1/classify", json={"text": ["ok", "  "]})
    assert r.status_code == 422 and "text[1]" in r.json()["error"]
    assert "POST /v1/classify" in served.get("/v1/nowhere").json()["error"]
    # An encoder-only checkpoint without a classification head: 400 naming fill-mask.
    app = create_app(ModelHost(load_model(encoder_checkpoint(0))), ServeSettings(threads=1))
    with TestClient(app) as client:
        r = client.post("/v1/classify", json={"text": ["a"]})
        assert r.status_code == 400 and "use POST /v1/fill-mask" in r.json()["error"]
        assert client.post("/v1/fill-mask", json={"text": "a [MASK]"}).status_code == 200
