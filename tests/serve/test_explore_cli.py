"""``attnkit explore``: a self-contained page for every family, equal to what the server sends."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from attnkit.checkpoints.loading import load_model
from attnkit.cli.main import main
from attnkit.serve.app import create_app
from attnkit.serve.model_host import ModelHost


def _embedded(html: str) -> dict:
    return json.loads(html.split('id="attnkit-payload" type="application/json">')[1].split("<")[0])


@pytest.mark.parametrize(
    ("family", "text", "groups"),
    [
        ("transformer", "forty-two", 3),
        ("rnn", "forty-two", 1),
        ("decoder_only", "the cat", 1),
        ("encoder_only", "the [MASK]at sat", 1),
    ],
)
def test_explore_writes_the_served_payload(checkpoint, tmp_path, capsys, family, text, groups):
    run = checkpoint(family)
    out = tmp_path / "page.html"
    argv = ["explore", "--checkpoint", str(run), "--text", text, "--out", str(out),
            "--beam", "2", "--nbest", "2", "--max-new-tokens", "6"]  # fmt: skip
    assert main(argv) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    html = out.read_text(encoding="utf-8")
    payload = _embedded(html)
    assert len(payload["groups"]) == groups
    assert "connect-src 'none'" in html  # the exported page may not fetch anything
    with TestClient(create_app(ModelHost(load_model(run)))) as c:
        body = {"text": [text], "beam": 2, "nbest": 2, "explore": True, "max_new_tokens": 6}
        served = c.post("/v1/explore", json=body).json()["explore"]
    assert served == payload


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--out", "page.png"], "--out"),
        (["--beam", "0"], "--beam"),
        (["--text", "  "], "--text"),
        (["--text", "nine hundred " * 10], "--text: 130 tokens"),
    ],
)
def test_explore_bad_arguments(checkpoint, tmp_path, capsys, extra, needle):
    argv = ["explore", "--checkpoint", str(checkpoint("transformer")), "--text", "one",
            "--out", str(tmp_path / "p.html"), *extra]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1
