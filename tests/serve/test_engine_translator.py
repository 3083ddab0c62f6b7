"""``attnkit serve --engine ctranslate2|onnxruntime``: /v1/translate answers what
``attnkit translate --engine`` prints, still batched; refusals; the explorer stays attnkit's."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from fastapi.testclient import TestClient

from attnkit.checkpoints import safe_files
from attnkit.checkpoints.loading import LoadedModel, load_model
from attnkit.cli.main import main
from attnkit.engines.registry import RunOptions
from attnkit.serve.app import ServeSettings, create_app
from attnkit.serve.engine_translator import open_translator
from attnkit.serve.model_host import ModelHost

pytest.importorskip("ctranslate2")

TEXTS = ["forty two", "seven hundred", "one", "nine thousand twelve", "eighty", "two hundred one"]
# Greedy, and beam with n-best at alpha 0 (the one alpha CTranslate2's beam search shares).
SEARCHES = {"greedy": ["--greedy"], "beam": ["--beam", "3", "--nbest", "2"]}
BODIES = {"greedy": {"beam": 1}, "beam": {"beam": 3, "nbest": 2}}  # alpha: the server's 0


@pytest.fixture(scope="module")
def run(checkpoint: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private copy of the tiny trained Transformer run (engine caches are written inside)."""
    return Path(shutil.copytree(checkpoint("transformer"), tmp_path_factory.mktemp("eng") / "run"))


def _caches(run: Path, name: str) -> list[Path]:
    return sorted(run.rglob(f"engines/{name}-*"))


def _translate(capsys: Any, run: Path, source: Path, *args: str) -> list[str]:
    code = main(["translate", "--checkpoint", str(run), "--input", str(source), "--alpha", "0",
                 "--max-len-b", "50", *args])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    return out.splitlines()


def _open(run: Path, name: str, said: list[str] | None = None) -> tuple[LoadedModel, Any]:
    loaded = load_model(run, "cpu")
    say = (said if said is not None else []).append
    return loaded, open_translator(name, loaded, RunOptions(threads=1), alpha=0.0, say=say)


@pytest.mark.parametrize(
    "name", ["ctranslate2", pytest.param("onnxruntime", marks=pytest.mark.slow)]
)  # onnxruntime: the ONNX export takes ~10-20 s on 2 cores
def test_served_translations_equal_translate_engine_lines(
    name, run, tmp_path, capsys, fresh_server
):
    source = tmp_path / "in.txt"
    source.write_text("".join(t + "\n" for t in TEXTS), encoding="utf-8")
    expected = {}
    for search, args in SEARCHES.items():
        expected[search] = _translate(capsys, run, source, *args, "--engine", name)
        if search == "greedy" or name == "onnxruntime":  # CTranslate2's beam: see the xfail
            assert expected[search] == _translate(capsys, run, source, *args), search
    assert len(_caches(run, name)) == 1  # `translate` converted it

    served = fresh_server(run, "--engine", name, "--alpha", "0")
    for search, body in BODIES.items():
        answer = httpx.post(served.url + "/v1/translate", json={"text": TEXTS, **body}, timeout=60)
        assert answer.status_code == 200, answer.text
        got = answer.json()
        lines = ["\t".join(h["text"] for h in row) for row in got["nbest"]]
        assert lines == expected[search], search
        assert got["translations"] == [line.split("\t")[0] for line in expected[search]]
    info = httpx.get(served.url + "/v1/model", timeout=10).json()
    assert info["engine"]["name"] == name and info["engine"]["explorer"] == "attnkit"
    assert info["default_alpha"] == 0.0
    assert len(_caches(run, name)) == 1  # the server reused the cache


@pytest.mark.xfail(
    strict=True,
    reason="CTranslate2's beam search stops later than attnkit's "
    "(fairseq's rule: done once K hypotheses finished) and its softmax has no "
    "<pad>; on this trained model its beam lines differ from attnkit's",
)
def test_ctranslate2_beam_lines_equal_attnkit(run, tmp_path, capsys):
    source = tmp_path / "in.txt"
    source.write_text("".join(t + "\n" for t in TEXTS), encoding="utf-8")
    args = SEARCHES["beam"]
    assert _translate(capsys, run, source, *args, "--engine", "ctranslate2") == _translate(
        capsys, run, source, *args
    )


@pytest.mark.parametrize("workers", [1, 2])
def test_concurrent_requests_are_batched_through_the_engine(run, workers):
    """Also with two batch workers (``serve --engine-workers 2``): each answer is still
    what the engine gives the request alone."""
    loaded = load_model(run, "cpu")
    translator = open_translator("ctranslate2", loaded, RunOptions(threads=1, workers=workers),
                                 alpha=0.0, say=lambda line: None)  # fmt: skip
    engine = ModelHost(loaded, translator)
    real, calls = translator.engine.translator, []

    class Spy:  # counts the sentences of each translate_batch call
        def translate_batch(self, batch: list[Any], **options: Any) -> Any:
            calls.append(len(batch))
            return real.translate_batch(batch, **options)

    translator.engine.translator = Spy()
    settings = ServeSettings(max_wait_ms=300, max_batch_tokens=4000, alpha=0.0,
                             batch_workers=workers)  # fmt: skip
    app = create_app(engine, settings)
    batcher = app.app.state.batcher  # type: ignore[attr-defined]  # RequestGuard wraps FastAPI
    assert batcher.workers == workers
    requests = [{"text": [t], "beam": 2} for t in TEXTS]

    async def go() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            return await asyncio.gather(*(client.post("/v1/translate", json=r) for r in requests))

    batcher.start()
    try:
        answers = asyncio.run(go())
    finally:
        batcher.stop()
    assert all(a.status_code == 200 for a in answers), [a.text for a in answers]
    stats = batcher.stats
    assert stats.batched_requests == len(requests)
    assert stats.batches < len(requests) and stats.largest_batch > 1, stats
    assert max(a.json()["timing"]["batch_requests"] for a in answers) > 1
    assert calls and max(calls) > 1, calls  # one CTranslate2 call decoded several requests
    for request, answer in zip(requests, answers):  # each as the engine decodes it alone
        alone = translator.translate(engine.encode_sources(request["text"]), beam=2, alpha=0.0,
                                     nbest=1)  # fmt: skip
        assert answer.json()["translations"] == [engine.result_json(r, 1)["translation"]
                                                 for r in alone]  # fmt: skip


def test_ctranslate2_leaves_out_the_rows_of_cancelled_requests(run):
    from attnkit.serve.handles import CLIENT_GONE, RequestCancelled, RequestHandle

    loaded, translator = _open(run, "ctranslate2")
    engine = ModelHost(loaded, translator)
    real, calls = translator.engine.translator, []

    class Spy:  # records the sources of each translate_batch call
        def translate_batch(self, batch: list[Any], **options: Any) -> Any:
            calls.extend(batch)
            return real.translate_batch(batch, **options)

    translator.engine.translator = Spy()
    sources = engine.encode_sources(["forty two", "eighty"])
    kept, gone = RequestHandle(), RequestHandle()
    gone.cancel(CLIENT_GONE)
    results = translator.translate(sources, beam=1, alpha=0.0, nbest=1, handles=[kept, gone])
    pieces = [loaded.tokenizer.id_to_token(t) for t in sources[0][:-1]]  # CT2 appends EOS
    assert calls == [pieces]  # "eighty" was never decoded
    alone = translator.translate(sources[:1], beam=1, alpha=0.0, nbest=1)
    assert results[0].tokens == alone[0].tokens
    with pytest.raises(RequestCancelled):
        translator.translate(sources, beam=1, alpha=0.0, nbest=1, handles=[gone, gone])


@pytest.fixture(scope="module")
def client(run: Path) -> Iterator[TestClient]:
    """The app on --engine ctranslate2 --alpha 0, lifespan running."""
    loaded, translator = _open(run, "ctranslate2")
    with TestClient(create_app(ModelHost(loaded, translator), ServeSettings(alpha=0.0))) as c:
        yield c


def test_an_option_the_engine_cannot_honour_is_a_422_naming_the_field(client):
    answer = client.post("/v1/translate", json={"text": ["forty two"], "beam": 2, "alpha": 0.6})
    assert answer.status_code == 422
    error = answer.json()["error"]
    assert error.startswith("alpha: 0.6 cannot be served by --engine ctranslate2 (")
    assert "\n" not in error and "agree only at --alpha 0" in error
    assert client.post("/v1/translate", json={"text": ["one"], "beam": 1, "alpha": 0.6}).is_success
    assert client.post("/v1/translate", json={"text": ["one"], "beam": 4}).is_success  # alpha 0


def test_the_explorer_reads_the_attnkit_model(client):
    engine: ModelHost = client.app.app.state.engine  # type: ignore[attr-defined]
    answer = client.post("/v1/translate", json={"text": ["seven hundred"], "explore": True})
    assert answer.status_code == 200, answer.text
    got = answer.json()
    assert got["explore"]["output"] == got["translations"][0]  # the engine's output, ...
    names = {g["name"] for g in got["explore"]["groups"]}
    assert any("cross" in n for n in names), names  # ... and the attnkit model's attention
    explored = client.post("/v1/explore", json={"text": ["seven hundred"]})
    assert explored.status_code == 200, explored.text
    src = engine.encode_sources(["seven hundred"])
    alone = engine.translate(src, beam=4, alpha=0.6, nbest=1)[0]  # attnkit, as ever
    assert explored.json()["output"] == engine.result_json(alone, 1)["translation"]
    assert client.get("/").status_code == 200


def test_startup_converts_once_and_rebuilds_a_stale_cache(run, tmp_path):
    own = Path(shutil.copytree(run, tmp_path / "run"))
    for cache in _caches(own, "ctranslate2"):
        shutil.rmtree(cache)
    said: list[str] = []
    _open(own, "ctranslate2", said)
    assert len(said) == 1 and "converting" in said[0] and "--engine ctranslate2" in said[0]
    _open(own, "ctranslate2", said)
    assert len(said) == 1  # a cache hit says nothing
    (ckpt,) = {p.parent.parent for p in _caches(own, "ctranslate2")}
    weights = safe_files.load_tensors(ckpt / "model.safetensors")
    torch.manual_seed(1)
    perturbed = {k: v + 0.5 * torch.randn_like(v) for k, v in weights.items()}
    safe_files.save_tensors(ckpt / "model.safetensors", perturbed)
    _open(own, "ctranslate2", said)
    assert len(said) == 2 and "is stale (the weights changed)" in said[1]
    assert len(_caches(own, "ctranslate2")) == 1


@pytest.mark.parametrize(
    "family,args,named",
    [
        ("transformer", ["--engine", "ctranslate2"], "--alpha 0.6: CTranslate2 divides"),
        ("transformer", ["--engine", "ctranslate2", "--alpha", "0", "--precision", "int8w"],
         "--precision int8w:"),
        ("transformer", ["--engine", "onnxruntime", "--precision", "int8"], "--precision int8:"),
        ("decoder_only", ["--engine", "onnxruntime"],
         "--engine onnxruntime: serves Transformer translation checkpoints;"),
        ("rnn", ["--engine", "ctranslate2", "--alpha", "0"],
         "--engine ctranslate2: serves Transformer translation checkpoints;"),
        ("transformer", ["--engine-workers", "2"],
         "--engine-workers 2: only with --engine ctranslate2"),
        ("transformer", ["--engine", "ctranslate2", "--alpha", "0", "--engine-workers", "0"],
         "--engine-workers 0: must be >= 1"),
    ],
)  # fmt: skip
def test_refusals_at_startup_are_one_line_and_convert_nothing(
    capsys, checkpoint, tmp_path, family, args, named
):
    own = Path(shutil.copytree(checkpoint(family), tmp_path / "run"))
    code = main(["serve", "--checkpoint", str(own), "--port", "0", *args])
    err = capsys.readouterr().err
    assert code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith(f"attnkit serve: error: {named}"), err
    assert not list(own.rglob("engines"))


def test_help_explains_the_engine(capsys):
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--engine {attnkit,ctranslate2,onnxruntime}" in text
    assert "the explorer's attention maps come from the attnkit model" in text


def test_model_info_says_attnkit_by_default(checkpoint):
    with TestClient(create_app(ModelHost(load_model(checkpoint("transformer"))))) as c:
        info = c.get("/v1/model").json()
    assert info["engine"] == {"name": "attnkit"} and info["default_alpha"] == 0.6
    assert json.dumps(info)  # plain JSON
