"""``POST /v1/answer``: concurrent questions share one batched pass over their windows and
each gets the answer it gets alone (and what ``attnkit answer`` prints); bad requests are
JSON 4xx in one line; other checkpoints refuse the endpoint."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import torch
from fastapi.testclient import TestClient

from attnkit.checkpoints import save_checkpoint
from attnkit.checkpoints.loading import load_model
from attnkit.data.qa_windows import default_stride
from attnkit.data.squad import QAExample
from attnkit.data.tokenizers import CharTokenizer
from attnkit.evaluation.question_answering import predict_answers
from attnkit.models import EncoderOnlyConfig, EncoderOnlyModel
from attnkit.serve.app import ServeSettings, create_app
from attnkit.serve.model_host import ModelHost

CONTEXT = "the cat sat on the mat. a dog on the log. " * 3  # longer than one window


@pytest.fixture(scope="module")
def reader_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random QA checkpoint: a start/end token head, 48 positions, char tokenizer."""
    torch.manual_seed(2)
    tok = CharTokenizer.train([CONTEXT + "?wh"])
    config = EncoderOnlyConfig(d_model=32, num_heads=4, d_ff=64, num_layers=2, max_len=48,
                               vocab_size=tok.vocab_size + 1, mask_id=tok.vocab_size,
                               num_labels=2, label_names=("start", "end"), label_level="token",
                               type_vocab_size=2, dropout=0.0)  # fmt: skip
    model = EncoderOnlyModel(config).eval()
    out = tmp_path_factory.mktemp("reader") / "run"
    save_checkpoint(out, model_state=model.state_dict(), config=config.to_dict(),
                    tokenizer_json=tok.to_json())  # fmt: skip
    return out


@pytest.fixture
def served(reader_run: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    engine = ModelHost(load_model(reader_run))
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
        client.gate, client.rows, client.engine = gate, rows, engine  # type: ignore[attr-defined]
        yield client
        gate.set()


QUESTIONS = ["what sat?", "who is on the log?", "where?", "the cat?"]


def test_concurrent_questions_are_batched_and_answered_as_alone(served: Any):
    alone = [served.post("/v1/answer", json={"question": q, "context": CONTEXT}).json()
             for q in QUESTIONS]  # fmt: skip
    engine = served.engine
    examples = [QAExample(str(i), q, CONTEXT, (), (), "t") for i, q in enumerate(QUESTIONS)]
    expected = predict_answers(engine.model, engine.tokenizer, examples, max_len=48,
                               stride=default_stride(48))  # fmt: skip
    for got, want in zip(alone, expected):
        assert (got["answer"], got["start"], got["end"]) == (want[0].text, want[0].start,
                                                              want[0].end)  # fmt: skip
        assert CONTEXT[got["start"] : got["end"]] == got["answer"]
    served.rows.clear()
    served.gate.clear()
    with ThreadPoolExecutor(len(QUESTIONS)) as pool:
        futures = [pool.submit(served.post, "/v1/answer", json={"question": q, "context": CONTEXT})
                   for q in QUESTIONS]  # fmt: skip
        time.sleep(0.5)  # the first holds the worker at the gate, the others queue
        served.gate.set()
        together = [f.result().json() for f in futures]
    for got, want in zip(together, alone):
        assert (got["answer"], got["start"], got["end"]) == (want["answer"], want["start"],
                                                              want["end"])  # fmt: skip
        assert got["score"] == pytest.approx(want["score"], abs=1e-5)
    assert max(r["timing"]["batch_requests"] for r in together) > 1


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"question": "q?"}, "context"),
        ({"question": " ", "context": "abc"}, "question: empty text"),
        ({"question": "q?", "context": "abc", "max_answer_len": 0}, "max_answer_len"),
        ({"question": "q?", "context": "abc", "top_k": 2}, "top_k"),
    ],
)
def test_bad_requests_are_json_4xx(served: Any, body: dict[str, Any], needle: str):
    response = served.post("/v1/answer", json=body)
    assert response.status_code == 422
    error = response.json()["error"]
    message = error["message"] if isinstance(error, dict) else error
    assert needle in message and "\n" not in message


def test_other_checkpoints_refuse_the_endpoint(encoder_checkpoint: Callable[[int], Path]):
    app = create_app(ModelHost(load_model(encoder_checkpoint(3))), ServeSettings(threads=1))
    with TestClient(app) as client:
        response = client.post("/v1/answer", json={"question": "q?", "context": "the cat"})
    assert response.status_code == 400
    error = response.json()["error"]
    assert "needs an extractive question-answering checkpoint" in str(error)
