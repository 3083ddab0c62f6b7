"""``POST /v1/summarize`` on tiny (untrained) summarization checkpoints: what ``attnkit
summarize`` writes, in dynamic batches, and a one-line 4xx for every bad request."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from fastapi.testclient import TestClient

from attnkit.checkpoints import save_checkpoint
from attnkit.checkpoints.loading import load_model
from attnkit.checkpoints.rundir import checkpoint_dir
from attnkit.data.tokenizers import CharTokenizer
from attnkit.decoding.summaries import summarize_texts
from attnkit.models import DecoderOnlyConfig, DecoderOnlyLM, EncoderDecoder, TransformerConfig
from attnkit.serve.app import ServeSettings, create_app
from attnkit.serve.batcher import DynamicBatcher
from attnkit.serve.model_host import ModelHost

CORPUS = "please see the gas report and the lunch notes below, thanks. meeting at noon?"
TEXTS = [
    "the gas report is late",
    "lunch at noon? " * 6,  # 90 characters: cut to the model's 39 source positions
    "please see the notes",
]


def _spread(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    """``model`` with its weights scaled up: a random model that writes something other than
    EOS first, so that a mixed-up or missing summary shows (the seeds are picked for it)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" not in name:
                p.mul_(3.0)
    return model.eval()


def _run(root: Path, config: Any, model: torch.nn.Module, tok: CharTokenizer, task: str) -> Path:
    """A run directory as ``attnkit train`` leaves it: run.json and one checkpoint."""
    run = root / "run"
    (run / "checkpoints").mkdir(parents=True)
    save_checkpoint(checkpoint_dir(run, 1), model_state=model.state_dict(),
                    config=config.to_dict(), tokenizer_json=tok.to_json())  # fmt: skip
    (run / "run.json").write_text(json.dumps({"task": task}))
    return run


@pytest.fixture(scope="module")
def seq2seq_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(3)
    tok = CharTokenizer.train([CORPUS])
    config = TransformerConfig(d_model=32, num_heads=4, d_ff=48, num_encoder_layers=1,
                               num_decoder_layers=1, src_vocab_size=tok.vocab_size,
                               tgt_vocab_size=tok.vocab_size, max_len=40, dropout=0.0)  # fmt: skip
    root = tmp_path_factory.mktemp("summarizer")
    return _run(root, config, _spread(EncoderDecoder(config), 3), tok, "summarization")


@pytest.fixture(scope="module")
def client(seq2seq_run: Path) -> Iterator[TestClient]:
    app = create_app(ModelHost(load_model(seq2seq_run)), ServeSettings(max_new_tokens=64))
    with TestClient(app) as c:
        yield c


def test_summaries_are_what_attnkit_summarize_writes(client, seq2seq_run):
    r = client.post("/v1/summarize", json={"text": TEXTS, "beam": 2, "max_tokens": 6})
    assert r.status_code == 200, r.text
    body = r.json()
    loaded = load_model(seq2seq_run)
    want = summarize_texts(loaded.model, loaded.tokenizer, TEXTS, beam=2, max_tokens=6)
    assert body["summaries"] == want and len(set(want)) == 3 and all(want)
    assert body["timing"]["batch_sentences"] == 3
    one = client.post("/v1/summarize", json={"text": TEXTS[0], "beam": 2, "max_tokens": 6})
    assert one.json()["summaries"] == want[:1]  # one text: a list of one summary
    # the checkpoint still translates, and its 404s name both endpoints
    assert client.post("/v1/translate", json={"text": ["gas"]}).status_code == 200
    missing = client.get("/v1/nowhere").json()["error"]
    assert "POST /v1/summarize" in missing and "POST /v1/translate" in missing


def test_concurrent_requests_share_a_batch_and_equal_each_alone(seq2seq_run):
    engine = ModelHost(load_model(seq2seq_run))
    app = create_app(engine, ServeSettings(max_wait_ms=200))
    batcher: DynamicBatcher = app.app.state.batcher  # type: ignore[attr-defined]
    bodies = [{"text": [t], "beam": 1, "max_tokens": 5} for t in TEXTS]

    async def go() -> list[Any]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            answers = await asyncio.gather(*(c.post("/v1/summarize", json=b) for b in bodies))
        return [a.json() for a in answers]

    batcher.start()
    try:
        answers = asyncio.run(go())
    finally:
        batcher.stop()
    assert max(a["timing"]["batch_requests"] for a in answers) > 1
    for text, answer in zip(TEXTS, answers, strict=True):
        alone = summarize_texts(engine.model, engine.tokenizer, [text], beam=1, max_tokens=5)
        assert answer["summaries"] == alone and alone[0]


OK = {"text": ["the gas report"]}
# (id, body, status, text the one-line error must hold)
BAD: list[tuple[str, Any, int, str]] = [
    ("no texts", {"text": []}, 422, "text:"),
    ("text missing", {"beam": 2}, 422, "text: field required"),
    ("text a number", {"text": 42}, 422, "text:"),
    ("a text a number", {"text": ["a", 42]}, 422, "text[1]"),
    ("empty text", {"text": [""]}, 422, "text[0]"),
    ("blank text", {"text": ["a", " \t"]}, 422, "text[1]: holds only whitespace"),
    ("too long", {"text": ["n" * 40_001]}, 422, "text[0]"),
    ("too many texts", {"text": ["a"] * 33}, 422, "text:"),
    ("beam zero", {**OK, "beam": 0}, 422, "beam"),
    ("beam a string", {**OK, "beam": "2"}, 422, "beam"),
    ("max_tokens zero", {**OK, "max_tokens": 0}, 422, "max_tokens"),
    ("max_tokens over the server's", {**OK, "max_tokens": 65}, 422, "max_tokens: 65 is over"),
    ("alpha NaN", b'{"text": ["a"], "alpha": NaN}', 422, "alpha"),
    ("unknown field", {**OK, "top_k": 3}, 422, "top_k: unknown field"),
    ("malformed JSON", b'{"text": [', 400, "malformed JSON"),
]  # fmt: skip


@pytest.mark.parametrize(("body", "status", "needle"), [b[1:] for b in BAD],
                         ids=[b[0] for b in BAD])  # fmt: skip
def test_bad_request_is_a_one_line_4xx(client, body, status, needle):
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    r = client.post("/v1/summarize", content=raw, headers={"content-type": "application/json"})
    assert r.status_code == status, r.text
    assert "\n" not in r.text and list(r.json()) == ["error"]
    assert needle in r.json()["error"]


def test_other_checkpoints_name_their_own_endpoint(encoder_checkpoint, tmp_path):
    encoder = create_app(ModelHost(load_model(encoder_checkpoint(0))))
    with TestClient(encoder) as c:
        r = c.post("/v1/summarize", json=OK)
        assert r.status_code == 400
        assert "needs a summarization checkpoint" in r.json()["error"]
        assert "use POST /v1/fill-mask" in r.json()["error"]
        assert "/v1/summarize" not in c.get("/v1/nowhere").json()["error"]


def test_decoder_only_summarizer_is_greedy(tmp_path):
    torch.manual_seed(0)
    tok = CharTokenizer.train([CORPUS + " Write a short summary (a subject line) of this text."])
    config = DecoderOnlyConfig.from_preset(
        "small", d_model=32, num_heads=2, d_ff=64, num_layers=1, max_len=256,
        vocab_size=tok.vocab_size, pad_id=tok.pad_id, bos_id=tok.bos_id, eos_id=tok.eos_id,
        dropout=0.0,
    )  # fmt: skip
    run = _run(tmp_path, config, _spread(DecoderOnlyLM(config), 0), tok, "summarization")
    engine = ModelHost(load_model(run))
    with TestClient(create_app(engine)) as c:
        r = c.post("/v1/summarize", json={"text": TEXTS[:2], "max_tokens": 4})
        assert r.status_code == 200, r.text
        want = summarize_texts(engine.model, engine.tokenizer, TEXTS[:2], beam=1, max_tokens=4)
        assert r.json()["summaries"] == want and len(set(want)) == 2 and all(want)
        beam = c.post("/v1/summarize", json={**OK, "beam": 2})
        assert beam.status_code == 422 and "beam: 2" in beam.json()["error"]
        assert c.post("/v1/generate", json={"prompt": "the"}).status_code == 200  # still an LM
