"""Every endpoint of ``attnkit serve``, in process, on tiny trained checkpoints of each family."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient

from attnkit.checkpoints.loading import load_model
from attnkit.decoding.generate import generate as lm_generate
from attnkit.serve.app import create_app
from attnkit.serve.model_host import ModelHost
from attnkit.visualize.explorer import decode_blob

FAMILIES = ("transformer", "rnn", "decoder_only", "encoder_only")


@pytest.fixture(scope="module")
def client(checkpoint: Callable[[str], Path]) -> Iterator[Callable[[str], TestClient]]:
    """``client(family)``: a TestClient (lifespan running) over that family's checkpoint."""
    open_clients: dict[str, TestClient] = {}

    def get(family: str) -> TestClient:
        if family not in open_clients:
            app = create_app(ModelHost(load_model(checkpoint(family))))
            open_clients[family] = TestClient(app).__enter__()
        return open_clients[family]

    yield get
    for c in open_clients.values():
        c.__exit__(None, None, None)


def _engine(c: TestClient) -> ModelHost:
    return c.app.app.state.engine  # type: ignore[attr-defined]  # RequestGuard wraps FastAPI


def _weights(payload: dict[str, Any], group: str) -> list[np.ndarray]:
    g = next(g for g in payload["groups"] if g["name"] == group)
    return [decode_blob(b, g["shape"]) for b in g["weights"]]


@pytest.mark.parametrize("family", FAMILIES)
def test_health_and_model(client, family):
    c = client(family)
    health = c.get("/v1/health").json()
    assert health["status"] == "ok" and health["queued"] == 0
    info = c.get("/v1/model").json()
    engine = _engine(c)
    assert info["family"] == family and info["kind"] == engine.kind
    assert info["config"] == json.loads(json.dumps(engine.model.config.to_dict()))  # tuples
    assert info["vocab_size"] == engine.tokenizer.vocab_size
    assert info["parameters"] == sum(p.numel() for p in engine.model.parameters())
    assert "/" not in info["checkpoint"]  # the directory's name, not the server's paths
    assert {"max_batch_tokens", "max_wait_ms"} <= info["batching"].keys()


@pytest.mark.parametrize("family", ["transformer", "rnn"])
def test_translate_equals_decoding_alone(client, family):
    c = client(family)
    texts = ["one hundred", "forty-two", "seven hundred eleven"]
    r = c.post("/v1/translate", json={"text": texts, "beam": 3, "nbest": 2, "alpha": 0.8})
    assert r.status_code == 200, r.text
    body = r.json()
    engine = _engine(c)
    for i, text in enumerate(texts):
        alone = engine.translate(engine.encode_sources([text]), beam=3, alpha=0.8, nbest=2)[0]
        assert body["translations"][i] == engine.tokenizer.decode(alone.tokens[0])
        assert body["scores"][i] == pytest.approx(alone.scores[0], abs=1e-4)
        assert [h["text"] for h in body["nbest"][i]] == [
            engine.tokenizer.decode(h.tokens) for h in alone.nbest[0][:2]
        ]
    timing = body["timing"]
    assert timing["batch_sentences"] == 3 and timing["total_ms"] >= timing["compute_ms"]
    assert "explore" not in body


def test_translate_explore_payload_is_the_models_attention(client):
    c = client("transformer")
    body = c.post("/v1/translate", json={"text": ["forty-two", "one"], "explore": True}).json()
    p = body["explore"]
    assert p["format"] == "attnkit.explorer" and p["kind"] == "seq2seq"
    assert [g["name"] for g in p["groups"]] == [
        "encoder self-attention", "decoder self-attention", "cross-attention"
    ]  # fmt: skip
    assert p["output"] == body["translations"][0]  # the first sentence
    engine = _engine(c)
    src = engine.encode_sources(["forty-two"])[0]
    best = engine.tokenizer.encode(body["translations"][0])
    with torch.no_grad():
        out = engine.model(
            torch.tensor([src]), torch.tensor([[engine.tokenizer.bos_id, *best]]), need_weights=True
        )
    assert len(p["source"]) == len(src) and p["source"][-1] == "</s>"
    assert len(p["target"]) == len(best) + 1 and p["target"][-1] == "</s>"
    cross = _weights(p, "cross-attention")
    assert len(cross) == 2 and cross[0].shape == (2, len(best) + 1, len(src))
    for layer, w in enumerate(out.cross_attentions):
        np.testing.assert_allclose(cross[layer], w[0].numpy(), atol=1 / 255)


def test_rnn_explore_has_one_map_of_one_head(client):
    c = client("rnn")
    p = c.post("/v1/translate", json={"text": ["forty-two"], "explore": True}).json()["explore"]
    (group,) = p["groups"]
    assert group["name"] == "cross-attention" and group["layers"] == 1 and group["heads"] == 1
    assert group["shape"] == [1, len(p["target"]), len(p["source"])]


def test_generate_is_seeded_and_greedy_matches_the_library(client):
    c = client("decoder_only")
    engine = _engine(c)
    greedy = c.post(
        "/v1/generate", json={"prompt": "the cat", "max_new_tokens": 8, "temperature": 0}
    ).json()
    prompt = engine.tokenizer.encode("the cat")
    ids = lm_generate(engine.model, torch.tensor([prompt]), 8, temperature=0.0)[0].tolist()
    assert greedy["full_text"] == engine.tokenizer.decode(ids)
    assert greedy["full_text"] == "the cat" + greedy["text"] and greedy["new_tokens"] == 8
    sampled = {"prompt": "the", "max_new_tokens": 12, "seed": 3, "top_k": 5, "top_p": 0.9}
    first, again = (c.post("/v1/generate", json=sampled).json() for _ in range(2))
    assert first["text"] == again["text"]  # a seeded generator per request
    zero = c.post("/v1/generate", json={"prompt": "the", "max_new_tokens": 0}).json()
    assert zero["text"] == "" and zero["new_tokens"] == 0


def test_generate_explore_covers_prompt_and_continuation(client):
    c = client("decoder_only")
    body = c.post(
        "/v1/generate",
        json={"prompt": "the dog", "max_new_tokens": 30, "temperature": 0, "explore": True},
    ).json()
    p = body["explore"]
    assert p["kind"] == "causal_lm" and "self-attention" in body["explore_note"]
    (group,) = p["groups"]
    n = len(p["source"]) + len(p["target"])
    assert group["query"] == group["key"] == "sequence"
    assert n == 24  # 7 + 30 tokens, shown through the model's 24-token window
    w = _weights(p, "self-attention")[0]
    assert np.allclose(np.triu(w[0], 1), 0)  # causal: nothing from the future


def test_fill_mask_and_its_explore_payload(client):
    c = client("encoder_only")
    body = c.post(
        "/v1/fill-mask", json={"text": "the cat [MASK]at", "top_k": 3, "explore": True}
    ).json()
    (mask,) = body["masks"]
    assert mask["position"] == 8 and len(mask["candidates"]) == 3
    probs = [m["score"] for m in mask["candidates"]]
    assert probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1 + 1e-6
    assert body["filled"] == "the cat " + mask["candidates"][0]["text"] + "at"
    p = body["explore"]
    assert p["kind"] == "masked_lm" and p["source"][8] == "[MASK]" and p["target"] == []
    assert p["output"] == body["filled"]


@pytest.mark.parametrize(
    ("family", "kind", "text"),
    [
        ("transformer", "seq2seq", "forty-two"),
        ("rnn", "seq2seq", "forty-two"),
        ("decoder_only", "causal_lm", "the cat"),
        ("encoder_only", "masked_lm", "the [MASK]at sat"),
    ],
)
def test_explore_endpoint_and_page_for_every_family(client, family, kind, text):
    c = client(family)
    r = c.post("/v1/explore", json={"text": [text], "beam": 2, "nbest": 2, "explore": True})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["explore"]["kind"] == kind and body["explore_note"]
    page = c.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    config = page.text.split('id="attnkit-config" type="application/json">')[1].split("<")[0]
    api = "/v1/translate" if kind == "seq2seq" else "/v1/explore"
    action = {"seq2seq": "Translate", "causal_lm": "Generate", "masked_lm": "Fill masks"}[kind]
    config = json.loads(config)
    assert config["api_url"] == api and config["form"]["action"] == action
    assert config["form"]["note"] == ""  # the answer shows what the button did
    assert "connect-src 'self'" in page.text


def test_the_page_of_a_text_classifier_says_classify(encoder_checkpoint):
    """Not "Fill masks": the button of a classifier's page says Classify, and its note
    says that the page shows attention and where the labels are (POST /v1/classify)."""
    with TestClient(create_app(ModelHost(load_model(encoder_checkpoint(3))))) as c:
        page = c.get("/").text
        config = json.loads(page.split('id="attnkit-config" type="application/json">')[1]
                            .split("<")[0])  # fmt: skip
        form = config["form"]
        assert form["action"] == "Classify" and not form["search"]
        assert "attention" in form["note"] and "/v1/classify" in form["note"]
        # What the button posts answers with the attention over the text ...
        body = {"text": ["the cat sat"], "beam": 4, "nbest": 4, "explore": True}
        r = c.post(config["api_url"], json=body)
        assert r.status_code == 200 and r.json()["explore"]["kind"] == "masked_lm"
        # ... and the endpoint the note names labels it.
        r = c.post("/v1/classify", json={"text": ["the cat sat"]})
        assert r.status_code == 200 and r.json()["predictions"][0]["label"] in ("neg", "neu", "pos")


@pytest.mark.parametrize(
    ("family", "path", "body", "right"),
    [
        ("decoder_only", "/v1/translate", {"text": ["a"]}, "/v1/generate"),
        ("encoder_only", "/v1/translate", {"text": ["a"]}, "/v1/fill-mask"),
        ("transformer", "/v1/generate", {"prompt": "a"}, "/v1/translate"),
        ("rnn", "/v1/fill-mask", {"text": "a [MASK]"}, "/v1/translate"),
        ("encoder_only", "/v1/generate", {"prompt": "a"}, "/v1/fill-mask"),
        ("decoder_only", "/v1/fill-mask", {"text": "[MASK]"}, "/v1/generate"),
    ],
)
def test_endpoints_of_another_family_name_the_right_one(client, family, path, body, right):
    r = client(family).post(path, json=body)
    assert r.status_code == 400
    assert r.json() == {"error": r.json()["error"]} and f"use POST {right}" in r.json()["error"]


def test_openapi_docs_list_the_endpoints(client):
    c = client("transformer")
    docs = c.get("/docs")
    assert docs.status_code == 200 and docs.headers["content-type"].startswith("text/html")
    assert docs.headers["content-security-policy"].startswith("default-src 'none'")
    assert "<script" not in docs.text and "cdn" not in docs.text.lower()  # nothing to fetch
    assert '<span class="path">/v1/translate</span>' in docs.text
    assert "<code>beam</code>" in docs.text  # the request's fields
    assert c.get("/redoc").status_code == 404  # FastAPI's ReDoc loads from a CDN: off
    paths = c.get("/openapi.json").json()["paths"]
    expected = {"/v1/translate", "/v1/generate", "/v1/fill-mask", "/v1/explore"}
    assert expected | {"/v1/health", "/v1/model"} <= paths.keys()
    schema = paths["/v1/translate"]["post"]["requestBody"]["content"]["application/json"]
    assert schema["schema"]["$ref"].endswith("/TranslateRequest")
