"""Bad requests get a 4xx and a one-line JSON error naming the field; the server carries on.

In process (TestClient) for what the app checks; ``test_server.py`` sends the
socket-level ones (half bodies, chunked uploads, slow headers) to a real uvicorn.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from attnkit.checkpoints.loading import load_model
from attnkit.serve.app import ServeSettings, create_app
from attnkit.serve.model_host import ModelHost

OK = {"text": ["forty-two"]}
LONG_TOKENS = " ".join(["nine hundred"] * 10)  # 129 characters: 129 tokens > 63
BODY_LIMIT = 4096


def _with(**changes: Any) -> dict[str, Any]:
    return {**OK, **changes}


# (id, path, body as JSON or raw bytes, extra headers, status, text the error must hold)
CASES: list[tuple[str, str, Any, dict[str, str], int, str]] = [
    ("malformed JSON", "/v1/translate", b'{"text": [', {}, 400, "malformed JSON"),
    ("trailing garbage", "/v1/translate", b'{"text": ["a"]} x', {}, 400, "malformed JSON"),
    ("not an object", "/v1/translate", [1, 2], {}, 422, "body: expected a JSON object"),
    ("null body", "/v1/translate", None, {}, 422, "body: expected a JSON object"),
    ("empty body", "/v1/translate", b"", {}, 422, "body"),
    ("missing text", "/v1/translate", {"beam": 4}, {}, 422, "text: field required"),
    ("text not a list", "/v1/translate", {"text": "forty-two"}, {}, 422, "text:"),
    ("no sentences", "/v1/translate", {"text": []}, {}, 422, "text:"),
    ("empty sentence", "/v1/translate", {"text": ["a", ""]}, {}, 422, "text[1]"),
    ("blank sentence", "/v1/translate", {"text": [" \t"]}, {}, 422, "text[0]: holds only"),
    ("sentence not a string", "/v1/translate", {"text": [42]}, {}, 422, "text[0]"),
    ("too many sentences", "/v1/translate", {"text": ["one"] * 65}, {}, 422, "text:"),
    ("too many characters", "/v1/translate", {"text": ["n" * 2001]}, {}, 422, "text[0]"),
    ("too many tokens", "/v1/translate", {"text": ["a", LONG_TOKENS]}, {}, 422,
     "text[1]: 129 tokens"),
    ("beam as a string", "/v1/translate", _with(beam="4"), {}, 422, "beam"),
    ("beam as a bool", "/v1/translate", _with(beam=True), {}, 422, "beam"),
    ("beam zero", "/v1/translate", _with(beam=0), {}, 422, "beam"),
    ("beam too wide", "/v1/translate", _with(beam=17), {}, 422, "beam"),
    ("beam a float", "/v1/translate", _with(beam=2.5), {}, 422, "beam"),
    ("alpha negative", "/v1/translate", _with(alpha=-1), {}, 422, "alpha"),
    ("alpha NaN", "/v1/translate", b'{"text": ["a"], "alpha": NaN}', {}, 422, "alpha"),
    ("nbest over beam", "/v1/translate", _with(beam=2, nbest=3), {}, 422, "nbest: 3"),
    ("explore not a bool", "/v1/translate", _with(explore="yes"), {}, 422, "explore"),
    ("unknown field", "/v1/translate", _with(file="/etc/passwd"), {}, 422, "file: unknown"),
    ("nested unknown", "/v1/explore", {"text": ["a"], "opts": {}}, {}, 422, "opts: unknown"),
    ("explore two texts", "/v1/explore", {"text": ["a", "b"]}, {}, 422, "text:"),
    ("wrong content type", "/v1/translate", OK, {"content-type": "text/plain"}, 415,
     "Content-Type"),
    ("form content type", "/v1/translate", b"text=a",
     {"content-type": "application/x-www-form-urlencoded"}, 415, "Content-Type"),
    ("body over the limit", "/v1/translate", {"text": ["x" * 1000] * 5}, {}, 413, "limit"),
    ("unknown path", "/v2/translate", OK, {}, 404, "/v2/translate: not found"),
    ("wrong method", "/v1/health", OK, {}, 405, "method POST"),
    ("classify on a translator", "/v1/classify", OK, {}, 400, "use POST /v1/translate"),
]  # fmt: skip

# /v1/classify on a text classifier of 48 positions and a character tokenizer
# (conftest's encoder_checkpoint(3)): (id, body, extra headers, status, error text).
CLASSIFY_OK = {"text": ["the cat sat"]}
CLASSIFY_CASES: list[tuple[str, Any, dict[str, str], int, str]] = [
    ("malformed JSON", b'{"text": [', {}, 400, "malformed JSON"),
    ("not an object", ["the cat"], {}, 422, "body: expected a JSON object"),
    ("empty body", b"", {}, 422, "body"),
    ("missing text", {"text_pair": ["a"]}, {}, 422, "text: field required"),
    ("text not a list", {"text": "the cat"}, {}, 422, "text:"),
    ("no texts", {"text": []}, {}, 422, "text:"),
    ("empty text", {"text": ["a", ""]}, {}, 422, "text[1]"),
    ("blank text", {"text": [" \t"]}, {}, 422, "text[0]: holds only"),
    ("text not a string", {"text": [42]}, {}, 422, "text[0]"),
    ("text null", {"text": None}, {}, 422, "text:"),
    ("lone surrogate", b'{"text": ["\\ud800"]}', {}, 422, "text[0]"),
    ("too many texts", {"text": ["a"] * 65}, {}, 422, "text:"),
    ("too many characters", {"text": ["n" * 2001]}, {}, 422, "text[0]"),
    ("too many tokens", {"text": ["a", "the cat sat " * 5]}, {}, 422,
     "text[1]: 62 tokens; the model reads at most 48"),
    ("pair of too many tokens", {"text": ["the cat sat"], "text_pair": ["on the mat " * 4]}, {},
     422, "text[0] + text_pair[0]: 58 tokens"),
    ("more pairs than texts", {"text": ["a"], "text_pair": ["b", "c"]}, {}, 422,
     "text_pair: 2 texts for 1 in text"),
    ("no pairs", {"text": ["a"], "text_pair": []}, {}, 422, "text_pair: 0 texts for 1"),
    ("pairs not a list", {"text": ["a"], "text_pair": "b"}, {}, 422, "text_pair:"),
    ("blank pair", {"text": ["a"], "text_pair": [" "]}, {}, 422, "text_pair[0]: holds only"),
    ("pair not a string", {"text": ["a"], "text_pair": [1]}, {}, 422, "text_pair[0]"),
    ("explore", {**CLASSIFY_OK, "explore": True}, {}, 422, "explore: unknown field"),
    ("a fill-mask field", {**CLASSIFY_OK, "top_k": 3}, {}, 422, "top_k: unknown field"),
    ("wrong content type", CLASSIFY_OK, {"content-type": "text/plain"}, 415, "Content-Type"),
    ("body over the limit", {"text": ["x" * 1000] * 5}, {}, 413, "limit"),
]  # fmt: skip


@pytest.fixture(scope="module")
def client(checkpoint: Callable[[str], Path]) -> Iterator[TestClient]:
    app = create_app(
        ModelHost(load_model(checkpoint("transformer"))), ServeSettings(max_body_bytes=BODY_LIMIT)
    )
    with TestClient(app) as c:
        yield c


def _post(c: TestClient, path: str, body: Any, headers: dict[str, str]) -> Any:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return c.post(path, content=raw, headers={"content-type": "application/json", **headers})


def _one_line_error(r: Any) -> str:
    assert r.headers["content-type"] == "application/json"
    assert "\n" not in r.text
    body = r.json()
    assert list(body) == ["error"] and isinstance(body["error"], str) and body["error"]
    return str(body["error"])


@pytest.mark.parametrize(("path", "body", "headers", "status", "needle"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])  # fmt: skip
def test_bad_request_gets_a_one_line_error(client, path, body, headers, status, needle):
    r = _post(client, path, body, headers)
    assert r.status_code == status, r.text
    assert needle in _one_line_error(r)


@pytest.fixture(scope="module")
def classifier(encoder_checkpoint: Callable[[int], Path]) -> Iterator[TestClient]:
    app = create_app(
        ModelHost(load_model(encoder_checkpoint(3))), ServeSettings(max_body_bytes=BODY_LIMIT)
    )
    with TestClient(app) as c:
        yield c


@pytest.mark.parametrize(
    ("body", "headers", "status", "needle"),
    [c[1:] for c in CLASSIFY_CASES],
    ids=[c[0] for c in CLASSIFY_CASES],
)
def test_bad_classify_request_gets_a_one_line_error(classifier, body, headers, status, needle):
    r = _post(classifier, "/v1/classify", body, headers)
    assert r.status_code == status, r.text
    assert needle in _one_line_error(r)


def test_classify_still_answers_after_the_bad_requests(classifier):
    for _, body, headers, _, _ in CLASSIFY_CASES:
        _post(classifier, "/v1/classify", body, headers)
    r = classifier.post("/v1/classify", json=CLASSIFY_OK)
    assert r.status_code == 200 and len(r.json()["predictions"]) == 1
    assert classifier.get("/v1/health").json()["queued"] == 0


def test_classify_on_a_masked_lm_without_a_classifier_head(checkpoint):
    with TestClient(create_app(ModelHost(load_model(checkpoint("encoder_only"))))) as c:
        r = c.post("/v1/classify", json=CLASSIFY_OK)
        assert r.status_code == 400 and "use POST /v1/fill-mask" in _one_line_error(r)


def test_content_length_over_the_limit_is_refused_before_reading(client):
    r = client.post(
        "/v1/translate",
        content=b"{}",
        headers={"content-type": "application/json", "content-length": str(10**9)},
    )
    assert r.status_code == 413 and "Content-Length" in _one_line_error(r)


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"prompt": "the", "temperature": -1}, "temperature"),
        ({"prompt": "the", "top_p": 0}, "top_p"),
        ({"prompt": "the", "max_new_tokens": 5000}, "max_new_tokens"),
        ({"prompt": "the", "seed": -1}, "seed"),
        ({"prompt": ""}, "prompt"),
        ({"text": "the"}, "text: unknown field; prompt: field required"),
    ],
)
def test_bad_generate_requests(checkpoint, body, needle):
    with TestClient(create_app(ModelHost(load_model(checkpoint("decoder_only"))))) as c:
        r = c.post("/v1/generate", json=body)
        assert r.status_code == 422 and needle in _one_line_error(r)


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"text": "no marker here"}, "text: holds no [MASK]"),
        ({"text": "[MASK]" * 30}, "text: 30 tokens"),
        ({"text": "a [MASK]", "top_k": 0}, "top_k"),
        ({"text": "a <m>", "mask_token": ""}, "mask_token"),
    ],
)
def test_bad_fill_mask_requests(checkpoint, body, needle):
    with TestClient(create_app(ModelHost(load_model(checkpoint("encoder_only"))))) as c:
        r = c.post("/v1/fill-mask", json=body)
        assert r.status_code == 422 and needle in _one_line_error(r)


def test_the_server_still_answers_after_the_bad_requests(client):
    for _, path, body, headers, _, _ in CASES:
        _post(client, path, body, headers)
    r = client.post("/v1/translate", json=OK)
    assert r.status_code == 200 and len(r.json()["translations"]) == 1
    assert client.get("/v1/health").json()["queued"] == 0


def test_text_that_names_a_file_is_only_text(client):
    """No request field is a path: a path is translated like any other text."""
    r = client.post("/v1/translate", json={"text": ["/etc/passwd"]})
    assert r.status_code == 200
    assert "root" not in r.json()["translations"][0]
    for path in ("/etc/passwd", "/../../etc/passwd", "/static/../config.json"):
        assert client.get(path).status_code == 404
