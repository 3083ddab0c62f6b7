"""The app from routers: the engine says which it offers, the 404s list exactly their
endpoints, the others answer 400 naming the right one, batch kinds run themselves."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from attnkit.checkpoints.loading import load_model
from attnkit.serve.app import create_app
from attnkit.serve.model_host import ModelHost
from attnkit.serve.routes import ROUTERS
from attnkit.serve.routes.base import BatchKind, run_batches
from attnkit.serve.routes.encoder import ClassifyBatch, EmbedBatch
from attnkit.serve.routes.translation import TranslationBatch


@pytest.fixture(scope="module")
def classifier(encoder_checkpoint) -> ModelHost:
    return ModelHost(load_model(encoder_checkpoint(3)))


def test_a_classifier_offers_the_encoder_router_and_lists_its_endpoints(classifier):
    offered = {r.name for r in ROUTERS if r.offered(classifier)}
    assert offered == {"common", "encoder"}
    assert classifier.page_form.action == "Classify" and classifier.page_url == "/v1/explore"
    with TestClient(create_app(classifier)) as c:
        error = c.get("/v1/nowhere").json()["error"]
        listed = set(error.split("endpoints: ")[1].split(", "))
        assert {"POST /v1/fill-mask", "POST /v1/classify", "POST /v1/embeddings",
                "POST /v1/explore", "GET /v1/health", "GET /"} <= listed  # fmt: skip
        # no tagging or QA head; routers the engine does not offer: not listed
        assert not {e for e in listed if e.split()[1] in
                    ("/v1/tag", "/v1/answer", "/v1/translate", "/v1/generate",
                     "/v1/summarize", "/v1/completions")}  # fmt: skip
        refused = c.post("/v1/translate", json={"text": ["a"]})
        assert refused.status_code == 400 and "use POST /v1/fill-mask" in refused.json()["error"]
        tag = c.post("/v1/tag", json={"text": ["a b"]})
        assert tag.status_code == 400 and "token classifier" in tag.json()["error"]
        health = c.get("/v1/health").json()
        assert health["kind"] == classifier.kind == "masked_lm"


def test_batch_kinds_are_keys_that_run_themselves(classifier):
    assert TranslationBatch(2, 0.6, 1) == TranslationBatch(2, 0.6, 1)
    assert hash(EmbedBatch("mean", True)) == hash(EmbedBatch("mean", True))
    assert EmbedBatch("mean", True) != EmbedBatch("cls", True)  # never one batch
    assert isinstance(ClassifyBatch(), BatchKind)
    run = run_batches(classifier)
    with pytest.raises(TypeError, match="not a batch kind"):
        run(("beam", 2), [], [])
