"""The OpenAI-compatible endpoints, spoken to by the ``openai`` package itself.

A tiny random decoder-only model with a ChatML tokenizer (SmolLM2's chat
template) is served in process (``TestClient`` as the client's HTTP transport)
and, for streaming as it happens and disconnects, by a real ``attnkit serve``.
Greedy answers must be what ``attnkit generate`` and the engine produce alone.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import torch
from chat_helpers import SMOLLM2_TEMPLATE, chatml_tokenizer
from fastapi.testclient import TestClient
from server_helpers import start_server, stop_server

from attnkit.checkpoints import save_checkpoint
from attnkit.checkpoints.loading import load_model
from attnkit.cli.main import main
from attnkit.models.decoder_only import DecoderOnlyLM
from attnkit.models.lm_config import DecoderOnlyConfig
from attnkit.serve.app import ServeSettings, create_app
from attnkit.serve.model_host import ModelHost

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
LIMIT = 64  # the in-process server's --max-new-tokens


def _save(out: Path, template: str | None) -> Path:
    torch.manual_seed(0)
    tok = chatml_tokenizer(template)
    config = DecoderOnlyConfig.from_preset(
        "small", d_model=32, num_heads=2, d_ff=64, num_layers=1, max_len=128,
        vocab_size=tok.vocab_size, pad_id=0, bos_id=1, eos_id=2, dropout=0.0,
    )  # fmt: skip
    model = DecoderOnlyLM(config).eval()
    save_checkpoint(out, model_state=model.state_dict(), config=config.to_dict(),
                    tokenizer_json=tok.to_json())  # fmt: skip
    return out


@pytest.fixture(scope="module")
def chat_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _save(tmp_path_factory.mktemp("openai") / "tiny-chat", SMOLLM2_TEMPLATE)


def _serve(run: Path, **settings: Any) -> TestClient:
    app = create_app(ModelHost(load_model(run)), ServeSettings(threads=1, **settings))
    return TestClient(app).__enter__()


@pytest.fixture(scope="module")
def http(chat_run: Path) -> Iterator[TestClient]:
    c = _serve(chat_run, max_new_tokens=LIMIT)
    yield c
    c.__exit__(None, None, None)


@pytest.fixture(scope="module")
def client(http: TestClient) -> openai.OpenAI:
    """The ``openai`` client, its HTTP going to the in-process app."""
    return openai.OpenAI(base_url="http://testserver/v1", api_key="unused", http_client=http)


def _engine(c: TestClient) -> ModelHost:
    return c.app.app.state.engine  # type: ignore[attr-defined]  # RequestGuard wraps FastAPI


def _greedy_alone(engine: ModelHost, prompt: list[int], n: int) -> tuple[list[int], str]:
    """The engine's own greedy tokens (cut after EOS) and their text, as served text reads."""
    new = engine.generate(prompt, max_new_tokens=n, temperature=0.0, top_k=0, top_p=1.0, seed=0)
    eos = engine.model.eos_id
    new = new[: new.index(eos) + 1] if eos in new else new
    tok = engine.tokenizer
    return new, tok.decode([*prompt, *new])[len(tok.decode(prompt)) :]


def test_chat_completion_is_attnkit_generate_chat(client, chat_run, capsys):
    r = client.chat.completions.create(
        model="anything", messages=[{"role": "system", "content": "Be brief."}, *QUESTION],
        temperature=0, max_tokens=12,
    )  # fmt: skip
    assert isinstance(r, openai.types.chat.ChatCompletion)
    assert r.object == "chat.completion" and r.model == "tiny-chat" and len(r.choices) == 1
    reply = r.choices[0].message
    assert reply.role == "assistant"
    code = main(["generate", "--checkpoint", str(chat_run), "--chat", "--system", "Be brief.",
                 "--prompt", QUESTION[0]["content"], "--temperature", "0",
                 "--max-new-tokens", "12", "--device", "cpu"])  # fmt: skip
    assert code == 0
    assert reply.content == capsys.readouterr().out[:-1]  # the CLI ends with a newline
    rendered = (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n"
        f"{QUESTION[0]['content']}<|im_end|>\n<|im_start|>assistant\n"
    )
    tok = chatml_tokenizer()
    assert r.usage is not None and r.usage.prompt_tokens == len(tok.encode(rendered))
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    stopped = r.choices[0].finish_reason == "stop"
    assert r.usage.completion_tokens <= 12 and (stopped or r.usage.completion_tokens == 12)


def test_completion_is_the_engines_greedy_generation(client, http):
    engine = _engine(http)
    prompt = "What is the capital"
    r = client.completions.create(model="m", prompt=prompt, temperature=0, max_tokens=10)
    assert isinstance(r, openai.types.Completion) and r.object == "text_completion"
    ids = engine.tokenizer.encode(prompt)
    new, text = _greedy_alone(engine, ids, 10)
    assert r.choices[0].text == text
    assert r.choices[0].finish_reason == ("stop" if engine.model.eos_id in new else "length")
    assert r.usage is not None
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (len(ids), len(new))
    echoed = client.completions.create(model="m", prompt=prompt, temperature=0, max_tokens=10,
                                       echo=True)  # fmt: skip
    assert echoed.choices[0].text == prompt + text


def test_streams_parse_and_add_up_to_the_whole_answer(client):
    whole = client.chat.completions.create(model="m", messages=QUESTION, temperature=0,
                                           max_tokens=20)  # fmt: skip
    chunks = list(client.chat.completions.create(model="m", messages=QUESTION, temperature=0,
                                                 max_tokens=20, stream=True))  # fmt: skip
    assert all(isinstance(c, openai.types.chat.ChatCompletionChunk) for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert (
        "".join(c.choices[0].delta.content or "" for c in chunks)
        == whole.choices[0].message.content
    )
    assert [c.choices[0].finish_reason for c in chunks][-1] == whole.choices[0].finish_reason
    assert all(c.choices[0].finish_reason is None for c in chunks[:-1])
    assert chunks[-1].usage == whole.usage and all(c.usage is None for c in chunks[:-1])
    assert len({c.id for c in chunks}) == 1

    whole_text = client.completions.create(model="m", prompt="Paris", temperature=0, max_tokens=20)
    pieces = list(client.completions.create(model="m", prompt="Paris", temperature=0,
                                            max_tokens=20, stream=True,
                                            stream_options={"include_usage": True}))  # fmt: skip
    assert "".join(p.choices[0].text for p in pieces if p.choices) == whole_text.choices[0].text
    assert pieces[-1].choices == [] and pieces[-1].usage == whole_text.usage  # include_usage
    assert pieces[-2].choices[0].finish_reason == whole_text.choices[0].finish_reason


def test_the_stream_is_server_sent_events_ending_with_done(http):
    body = {"messages": QUESTION, "max_tokens": 5, "stream": True, "temperature": 0}
    with http.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        raw = "".join(r.iter_text())
    events = raw.split("\n\n")
    assert events[-2:] == ["data: [DONE]", ""]
    assert all(e.startswith("data: {") for e in events[:-2])
    last = json.loads(events[-3].removeprefix("data: "))
    assert last["object"] == "chat.completion.chunk" and last["usage"]["completion_tokens"] >= 1


def test_n_choices_seed_and_stop(client):
    def ask(seed: int, **kw: Any) -> list[str]:
        r = client.completions.create(model="m", prompt="What is", max_tokens=12, n=3,
                                      seed=seed, **kw)  # fmt: skip
        assert [c.index for c in r.choices] == [0, 1, 2]
        return [c.text for c in r.choices]

    first = ask(7)
    assert ask(7) == first  # the seed makes sampling reproducible
    assert ask(8) != first
    greedy = client.completions.create(model="m", prompt="What is", max_tokens=12, temperature=0)
    text = greedy.choices[0].text
    stop = text[len(text) // 2 : len(text) // 2 + 2]
    assert len(stop) == 2, text
    cut = client.completions.create(model="m", prompt="What is", max_tokens=12, temperature=0,
                                    stop=[stop, "no such"])  # fmt: skip
    assert cut.choices[0].text == text[: text.index(stop)]
    assert cut.choices[0].finish_reason == "stop"
    streamed = client.completions.create(model="m", prompt="What is", max_tokens=12,
                                         temperature=0, stop=stop, stream=True)  # fmt: skip
    assert "".join(p.choices[0].text for p in streamed) == text[: text.index(stop)]


def test_models(client):
    models = client.models.list()
    assert [m.id for m in models.data] == ["tiny-chat"]
    assert client.models.retrieve("tiny-chat").owned_by == "attnkit"
    with pytest.raises(openai.NotFoundError) as e:
        client.models.retrieve("gpt-4")
    assert e.value.body["code"] == "model_not_found"  # type: ignore[index]


def _refused(status: int, body: dict[str, Any], param: str | None) -> str:
    error = body["error"]
    assert status == 400, body
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert "\n" not in error["message"]
    return str(error["message"])


JSON = {"content-type": "application/json"}


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": QUESTION, "max_tokens": LIMIT + 1}, "max_tokens"),
        ({"messages": QUESTION, "max_completion_tokens": LIMIT + 1}, "max_completion_tokens"),
        ({"messages": QUESTION, "temperature": 3}, "temperature"),
        ({"messages": QUESTION, "n": 0}, "n"),
        ({"messages": QUESTION, "frequency_penalty": 0.5}, "frequency_penalty"),
        ({"messages": QUESTION, "tools": []}, "tools"),
        ({"messages": [{"role": "robot", "content": "hi"}]}, "messages[0].role"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "user", "content": "hi " * 200}]}, "messages"),
        ({"messages": QUESTION, "stop": ["a", "b", "c", "d", "e"]}, "stop"),
        # a lone surrogate reached the tokenizer: a 500 (TypeError)
        ({"messages": [{"role": "user", "content": "hi \ud800"}]}, "messages"),
    ],
)
def test_chat_errors_are_openai_shaped_400s(http, body, param):
    # json.dumps escapes a lone surrogate as \\ud800 (a client's UTF-8 encoder would refuse it)
    r = http.post("/v1/chat/completions", content=json.dumps(body), headers=JSON)
    _refused(r.status_code, r.json(), param)


def test_the_client_raises_on_the_limit(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="m", messages=QUESTION, max_tokens=LIMIT + 1)
    assert e.value.status_code == 400
    assert e.value.body["param"] == "max_tokens"  # type: ignore[index]
    assert f"limit of {LIMIT} (--max-new-tokens)" in e.value.message
    ok = client.chat.completions.create(model="m", messages=QUESTION, max_tokens=LIMIT,
                                        temperature=0)  # fmt: skip
    assert ok.usage is not None and ok.usage.completion_tokens <= LIMIT


def test_completion_errors(http):
    r = http.post("/v1/completions", json={"prompt": ["ok", "x" * 600]})
    assert "prompt[1]: " in _refused(r.status_code, r.json(), "prompt[1]")
    r = http.post("/v1/completions", content=json.dumps({"prompt": ["ok", "\udfff"]}),
                  headers=JSON)  # fmt: skip
    assert "not valid Unicode" in _refused(r.status_code, r.json(), "prompt[1]")
    r = http.post("/v1/completions", json={"prompt": "hi", "suffix": "x"})
    _refused(r.status_code, r.json(), "suffix")
    r = http.post(
        "/v1/completions", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert r.status_code == 400 and r.json()["error"]["message"].startswith("body: malformed JSON")


def test_body_limit_and_wrong_kind_in_openai_shape(chat_run, checkpoint):
    small = _serve(chat_run, max_body_bytes=200)
    try:
        r = small.post(
            "/v1/chat/completions", json={"messages": [{"role": "user", "content": "x" * 300}]}
        )
        assert r.status_code == 413 and r.json()["error"]["type"] == "invalid_request_error"
        own = small.post("/v1/generate", json={"prompt": "x" * 300})
        assert own.status_code == 413 and isinstance(own.json()["error"], str)  # attnkit's shape
    finally:
        small.__exit__(None, None, None)
    mlm = _serve(checkpoint("encoder_only"))
    try:
        r = mlm.post("/v1/completions", json={"prompt": "hi"})
        message = _refused(r.status_code, r.json(), None)
        assert (
            message.startswith("/v1/completions needs a causal language model")
            and "fill-mask" in message
        )
    finally:
        mlm.__exit__(None, None, None)


def test_chat_needs_a_chat_template(tmp_path):
    plain = _serve(_save(tmp_path / "plain", None))
    try:
        r = plain.post("/v1/chat/completions", json={"messages": QUESTION})
        assert "no chat template" in _refused(r.status_code, r.json(), "messages")
        assert r.json()["error"]["code"] == "no_chat_template"
        ok = plain.post("/v1/completions", json={"prompt": "What is", "max_tokens": 3})
        assert ok.status_code == 200 and ok.json()["usage"]["prompt_tokens"] == 2
    finally:
        plain.__exit__(None, None, None)


@pytest.fixture(scope="module")
def served_chat(chat_run: Path) -> Iterator[Any]:
    served = start_server(chat_run)
    yield served
    stop_server(served)


def _batcher_stats(url: str) -> dict[str, Any]:
    stats: dict[str, Any] = httpx.get(url + "/v1/health", timeout=5).json()["batcher"]
    return stats


def test_real_server_streams_before_the_end_and_a_disconnect_frees_the_worker(served_chat):
    """Greedy n=8 x 1024 tokens takes seconds; the first piece comes long before, and
    closing the stream cancels the rest (the batcher counts it cancelled while running)."""
    client = openai.OpenAI(base_url=served_chat.url + "/v1", api_key="unused", max_retries=0)
    before = _batcher_stats(served_chat.url)["cancelled_running"]
    started = time.monotonic()
    stream = client.completions.create(model="m", prompt="What is the capital", n=8,
                                       max_tokens=1024, temperature=0, stream=True)  # fmt: skip
    first = next(iter(stream))
    first_s = time.monotonic() - started
    assert first.choices[0].text
    stream.close()
    deadline = time.monotonic() + 20
    while _batcher_stats(served_chat.url)["cancelled_running"] == before:
        assert time.monotonic() < deadline, "closing the stream did not cancel the generation"
        time.sleep(0.05)
    took = time.monotonic() - started
    # it still answers, at once, with the whole (short) answer
    r = client.chat.completions.create(model="m", messages=QUESTION, max_tokens=4, temperature=0)
    assert r.usage is not None and r.usage.completion_tokens >= 1
    # cancelled while running: the first piece came before the whole answer existed
    assert first_s < took
