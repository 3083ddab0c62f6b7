"""The explorer against the real server, in headless Debian Chromium (Playwright).

``attnkit serve`` runs in a subprocess on a free 127.0.0.1 port with a tiny
trained Transformer. The page is typed into like a user would; the hovered
highlights are checked against the served payload and the model's own
cross-attention; the page exported by ``attnkit explore`` must show the same
maps from file://. Every request either page makes is recorded: none may
leave 127.0.0.1 (served) or the file (exported).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import pytest
import torch

from attnkit.checkpoints.loading import load_model
from attnkit.cli.main import main
from attnkit.visualize.explorer import decode_blob

TEXT = "seven hundred twelve"
READY = "[data-testid=bigmap][data-ready='1']"


@pytest.fixture
def context(browser: Any) -> Iterator[Any]:
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    yield ctx
    ctx.close()


def _open(ctx: Any, url: str) -> tuple[Any, list[str], list[str]]:
    page = ctx.new_page()
    requests: list[str] = []
    errors: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(url)
    page.wait_for_selector("body[data-ready='1']", state="attached")
    return page, requests, errors


def _cross(payload: dict[str, Any], layer: int) -> np.ndarray:
    """One layer of the payload's cross-attention, ``(H, Tq, Tk)``, as the page's float32."""
    g = next(g for g in payload["groups"] if g["name"] == "cross-attention")
    return decode_blob(g["weights"][layer], g["shape"]).astype(np.float32)


def _strongest(row: np.ndarray) -> set[int]:
    """The source tokens the page lights up for a row: >= half the row's max, at most 8."""
    m = float(row.max())
    idx = sorted((j for j in range(len(row)) if row[j] >= 0.5 * m), key=lambda j: -row[j])
    return set(idx[:8])


def _check_hover(page: Any, payload: dict[str, Any], model_cross: list[Any], lh: tuple[int, int]):
    layer, head = lh
    page.select_option("[data-testid=layer-select]", str(layer))
    page.select_option("[data-testid=head-select]", str(head))
    big = page.eval_on_selector("[data-testid=bigmap]", "e => ({...e.dataset})")
    assert (big["group"], big["layer"], big["head"]) == ("cross-attention", str(layer), str(head))
    shown = _cross(payload, layer)[head]
    ours = model_cross[layer][0, head].numpy()
    for i in range(len(payload["target"])):
        page.hover(f"[data-testid=query-token][data-index='{i}']")
        lit = page.eval_on_selector_all(
            "[data-testid=key-token].hl", "els => els.map(e => +e.dataset.index)"
        )
        assert set(lit) == _strongest(shown[i]), f"target token {i}"
        # the model's argmax source token for this output token is lit, at full strength
        argmax = int(ours[i].argmax())
        assert argmax in lit or ours[i][lit].max() >= ours[i].max() - 2 / 255, (i, argmax, lit)
        top = page.eval_on_selector_all(
            "[data-testid=key-token].hl",
            "els => els.filter(e => e.style.getPropertyValue('--w') === '1.00')"
            ".map(e => +e.dataset.index)",
        )
        assert int(shown[i].argmax()) in top
    return big["checksum"]


def _keep(page: Any, tmp: Path, name: str) -> Path:
    path = tmp / name
    page.screenshot(path=str(path), full_page=True)
    keep = os.environ.get("ATTNKIT_SCREENSHOT_DIR")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(keep) / name)
    return path


def test_served_explorer_end_to_end(context, served_transformer, checkpoint, tmp_path):
    page, requests, errors = _open(context, served_transformer.url + "/")
    assert page.is_hidden("[data-testid=app]")
    page.fill("[data-testid=input-text]", TEXT)
    with page.expect_response(lambda r: r.url.endswith("/v1/translate")) as info:
        page.click("[data-testid=translate]")
    answer = info.value.json()
    page.wait_for_selector(READY)
    payload = answer["explore"]
    assert page.inner_text("[data-testid=output]") == answer["translations"][0]
    assert page.locator("[data-testid=nbest-item]").count() == len(answer["nbest"][0]) == 4
    assert page.locator("[data-testid=key-token]").count() == len(payload["source"])

    # the model's own cross-attention for the served translation (teacher forcing)
    loaded = load_model(checkpoint("transformer"))
    tok = loaded.tokenizer
    src = [*tok.encode(TEXT), tok.eos_id]
    out_ids = tok.encode(answer["translations"][0])
    with torch.no_grad():
        out = loaded.model(
            torch.tensor([src]), torch.tensor([[tok.bos_id, *out_ids]]), need_weights=True
        )
    for layer, w in enumerate(out.cross_attentions):
        np.testing.assert_allclose(_cross(payload, layer), w[0].numpy(), atol=1 / 255)

    first = _check_hover(page, payload, out.cross_attentions, (0, 0))
    _keep(page, tmp_path, "served-explorer.png")
    switched = _check_hover(page, payload, out.cross_attentions, (1, 1))
    assert switched != first, "switching layer and head left the map unchanged"

    with page.expect_download() as dl:
        page.click("[data-testid=export-png]")
    name = dl.value.suggested_filename
    assert name == "attention-cross-attention-L1-h1.png"
    assert Path(dl.value.path()).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    hosts = {urlsplit(u).hostname for u in requests}
    assert hosts == {"127.0.0.1"}, requests
    assert errors == []

    # the page `attnkit explore` writes: offline, same payload, same maps
    html = tmp_path / "explore.html"
    argv = ["explore", "--checkpoint", str(checkpoint("transformer")), "--text", TEXT,
            "--out", str(html), "--beam", "4", "--nbest", "4"]  # fmt: skip
    assert main(argv) == 0
    offline, offline_requests, offline_errors = _open(context, html.as_uri())
    offline.wait_for_selector(READY, state="attached")
    exported = json.loads(offline.eval_on_selector("#attnkit-payload", "e => e.textContent"))
    # The server packs its fp32 linears for oneDNN where faster (serve --precision fp32,
    # fp32_choice); `explore` keeps nn.Linear: the same sums in another order, so the
    # scores agree to float32 rounding (exactly only at some batch shapes).
    scores = [[h.pop("score") for h in p["nbest"]] for p in (exported, payload)]
    assert exported == payload
    assert scores[0] == pytest.approx(scores[1], rel=1e-6)
    for lh, checksum in (((0, 0), first), ((1, 1), switched)):
        assert _check_hover(offline, exported, out.cross_attentions, lh) == checksum
    assert {urlsplit(u).scheme for u in offline_requests} == {"file"}, offline_requests
    assert offline_errors == []


def test_served_classifier_page_says_classify_and_where_the_labels_are(
    context, fresh_server, encoder_checkpoint
):
    """A text classifier's button says Classify (not Fill masks); the page shows attention,
    and its status line says so and names /v1/classify, before and after an answer."""
    served = fresh_server(encoder_checkpoint(3))
    page, requests, errors = _open(context, served.url + "/")
    assert page.inner_text("[data-testid=translate]") == "Classify"
    note = page.inner_text("[data-testid=status]")
    assert "/v1/classify" in note and "attention" in note
    page.fill("[data-testid=input-text]", "the cat sat")
    with page.expect_response(lambda r: r.url.endswith("/v1/explore")) as info:
        page.click("[data-testid=translate]")
    assert info.value.status == 200
    page.wait_for_selector(READY)
    assert page.inner_text("[data-testid=status]") == note
    assert {urlsplit(u).hostname for u in requests} == {"127.0.0.1"}, requests
    assert errors == []


def test_served_lm_page_and_docs_page_load_nothing_from_outside(context, served_lm):
    """An LM checkpoint's page says what its button does; /docs is described without a CDN."""
    page, requests, errors = _open(context, served_lm.url + "/")
    assert page.inner_text("[data-testid=translate]") == "Generate"
    assert page.get_attribute("[data-testid=input-text]", "placeholder").startswith("Prompt")
    assert page.is_hidden("[data-testid=beam]")
    page.fill("[data-testid=input-text]", "the cat")
    with page.expect_response(lambda r: r.url.endswith("/v1/explore")) as info:
        page.click("[data-testid=translate]")
    answer = info.value.json()
    page.wait_for_selector(READY)
    assert page.inner_text("[data-testid=output]") == answer["output"]

    docs = context.new_page()
    docs.on("request", lambda r: requests.append(r.url))
    docs.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    docs.goto(served_lm.url + "/docs")
    docs.wait_for_load_state("load")
    headings = docs.locator("h2").all_inner_texts()
    for operation in ("POST/v1/chat/completions", "POST/v1/completions", "GET/v1/models",
                      "POST/v1/generate"):  # fmt: skip
        assert any(h.replace(" ", "").replace("\n", "") == operation for h in headings), headings
    assert docs.locator("code", has_text="max_tokens").count() >= 1  # the body's fields
    assert {urlsplit(u).hostname for u in requests} == {"127.0.0.1"}, requests
    assert errors == []
