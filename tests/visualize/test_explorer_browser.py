"""The explorer page in headless Chromium: rendering, hover, exports, 512 tokens, served mode.

Every page is opened from disk (file://) or from a stub server on 127.0.0.1, and
every request the page makes is recorded: none may leave.
Screenshots go to a pytest temp folder; set ``ATTNKIT_SCREENSHOT_DIR`` to keep them.
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import pytest
from explorer_examples import ALIGN, SOURCE, TARGET, causal_example, seq2seq_example, softmax

from attnkit.visualize.explorer import (
    AttentionGroup,
    ExplorerExample,
    build_payload,
    render_page,
    write_page,
)

READY = "[data-testid=bigmap][data-ready='1']"
SVG_NS = "{http://www.w3.org/2000/svg}"


@dataclass
class Opened:
    page: Any
    requests: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def indices(self, selector: str) -> list[int]:
        return self.page.eval_on_selector_all(selector, "els => els.map(e => +e.dataset.index)")

    def bigmap(self) -> dict[str, str]:
        return self.page.eval_on_selector("[data-testid=bigmap]", "e => ({...e.dataset})")


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("explorer-pages")
    rng = np.random.default_rng(7)
    rnn = ExplorerExample(
        kind="seq2seq",
        source=SOURCE,
        target=TARGET,
        nbest=[(" ".join(TARGET[:-1]), -0.3)],
        groups=[AttentionGroup("cross-attention", [softmax(rng.normal(0, 2, (1, 10, 9)))])],
        title="RNN",
    )
    examples = {"seq2seq": seq2seq_example(), "causal512": causal_example(), "rnn": rnn}
    pages = {k: write_page(folder / f"{k}.html", build_payload(ex)) for k, ex in examples.items()}
    # float16 blobs take the page's other decoding path
    pages["mlm"] = write_page(folder / "mlm.html", build_payload(_mlm(), dtype="float16"))
    return pages


def _mlm() -> ExplorerExample:
    """An encoder-only example whose head 0 of layer 0 looks at key (i + 2) mod 5."""
    logits = np.random.default_rng(8).normal(0, 0.5, (3, 5, 5))
    logits[0, np.arange(5), (np.arange(5) + 2) % 5] += 4
    return ExplorerExample(
        kind="masked_lm",
        source=["[CLS]", "the", "[MASK]", "sat", "[SEP]"],
        groups=[AttentionGroup("self-attention", [softmax(logits)] * 2)],
    )


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("explorer-screenshots")


def _screenshot(opened: Opened, shots: Path, name: str) -> Path:
    path = opened.page.screenshot(path=str(shots / name), full_page=True) and shots / name
    keep = os.environ.get("ATTNKIT_SCREENSHOT_DIR")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(keep) / name)
    return path


@pytest.fixture
def open_page(browser: Any) -> Iterator[Any]:
    contexts = []

    def _open(url: str, *, width: int = 1400, height: int = 1000, wait: bool = True) -> Opened:
        ctx = browser.new_context(
            viewport={"width": width, "height": height}, accept_downloads=True
        )
        contexts.append(ctx)
        opened = Opened(ctx.new_page())
        opened.page.on("request", lambda r: opened.requests.append(r.url))
        opened.page.on("pageerror", lambda e: opened.errors.append(str(e)))
        opened.page.on(
            "console", lambda m: opened.errors.append(m.text) if m.type == "error" else None
        )
        opened.page.goto(url)
        opened.page.wait_for_selector("body[data-ready='1']", state="attached")
        if wait:
            opened.page.wait_for_selector(READY, state="attached")
        return opened

    yield _open
    for ctx in contexts:
        ctx.close()


def _only_local_files(opened: Opened) -> None:
    assert opened.requests, "no request recorded at all"
    bad = [u for u in opened.requests if urlsplit(u).scheme != "file"]
    assert bad == [], f"the page made network requests: {bad}"
    assert opened.errors == []


def _download(opened: Opened, testid: str) -> tuple[str, bytes]:
    with opened.page.expect_download() as info:
        opened.page.click(f"[data-testid={testid}]")
    dl = info.value
    return dl.suggested_filename, Path(dl.path()).read_bytes()


def test_seq2seq_page_renders_offline(open_page, pages, shots):
    o = open_page(pages["seq2seq"].as_uri())
    p = o.page
    assert p.inner_text("[data-testid=output]") == "Two young men play football in the park ."
    assert p.locator("[data-testid=nbest-item]").count() == 3
    tabs = p.eval_on_selector_all("[data-testid=group-tab]", "els => els.map(e => e.dataset.name)")
    assert tabs == ["encoder self-attention", "decoder self-attention", "cross-attention"]
    assert o.bigmap()["group"] == "cross-attention"  # opens on the cross-attention
    assert p.locator("[data-testid=thumb]").count() == 2 * (4 + 1)  # heads + average per layer
    assert p.locator("[data-testid=query-token]").count() == len(TARGET)
    assert p.locator("[data-testid=key-token]").count() == len(SOURCE)
    assert p.locator("[data-testid=summary-row]").count() == 2 * 4
    _screenshot(o, shots, "explorer.png")
    _only_local_files(o)


def test_hover_highlights_the_alignment_both_ways(open_page, pages, shots):
    o = open_page(pages["seq2seq"].as_uri())
    o.page.select_option("[data-testid=layer-select]", "1")
    assert o.bigmap()["layer"] == "1" and o.bigmap()["head"] == "0"
    for i, j in enumerate(ALIGN):
        o.page.hover(f"[data-testid=query-token][data-index='{i}']")
        assert o.indices("[data-testid=key-token].hl") == [j], f"target token {i}"
        assert o.indices("[data-testid=query-token].active") == [i]
        # the step view follows: head 0 of layer 1 looks at the aligned source token
        step_head = o.page.locator("[data-testid=step-head][data-head='0']")
        assert step_head.get_attribute("data-argmax") == str(j)
    o.page.hover("[data-testid=query-token][data-index='4']")  # football -> Fußball, off-diagonal
    _screenshot(o, shots, "hover-target.png")
    for j in range(len(SOURCE)):
        o.page.hover(f"[data-testid=key-token][data-index='{j}']")
        expected = [i for i, a in enumerate(ALIGN) if a == j]
        assert sorted(o.indices("[data-testid=query-token].hl")) == expected, f"source {j}"
    o.page.mouse.move(1, 1)
    o.page.hover("[data-testid=readout]")
    assert o.indices("[data-testid=key-token].hl") == []
    _only_local_files(o)


def test_switching_layer_head_view_and_group_changes_the_map(open_page, pages):
    o = open_page(pages["seq2seq"].as_uri())
    p = o.page
    states = [o.bigmap()]
    p.select_option("[data-testid=head-select]", "2")
    states.append(o.bigmap())
    p.select_option("[data-testid=layer-select]", "1")
    states.append(o.bigmap())
    p.click("[data-testid=thumb][data-layer='0'][data-head='3'][data-view='head']")
    states.append(o.bigmap())
    p.select_option("[data-testid=view-select]", "average")
    states.append(o.bigmap())
    p.click("[data-testid=thumb][data-layer='1'][data-view='average']")
    states.append(o.bigmap())
    where = [(s["view"], s["layer"], s["head"]) for s in states]
    assert where == [
        ("head", "0", "0"),
        ("head", "0", "2"),
        ("head", "1", "2"),
        ("head", "0", "3"),
        ("average", "0", "0"),
        ("average", "1", "0"),
    ]
    assert len({s["checksum"] for s in states}) == len(states), "a switch left the map unchanged"
    # rollout exists for self-attention only
    assert p.is_disabled("[data-testid=view-select] option[value='rollout']")
    p.click("[data-testid=group-tab][data-name='encoder self-attention']")
    assert p.locator("[data-testid=query-token]").count() == len(SOURCE)
    assert p.locator("[data-testid=thumb][data-view='rollout']").count() == 2
    p.select_option("[data-testid=view-select]", "rollout")
    assert o.bigmap()["view"] == "rollout" and o.bigmap()["group"] == "encoder self-attention"
    # a summary row opens its head; headers sort
    p.click("[data-testid=summary-row][data-layer='1'][data-head='2']")
    assert (o.bigmap()["view"], o.bigmap()["layer"], o.bigmap()["head"]) == ("head", "1", "2")
    col = "[data-testid=summary-row] td:nth-child(3)"
    p.click("[data-testid=sort-entropy]")
    up = [float(t) for t in p.eval_on_selector_all(col, "els => els.map(e => e.textContent)")]
    p.click("[data-testid=sort-entropy]")
    down = [float(t) for t in p.eval_on_selector_all(col, "els => els.map(e => e.textContent)")]
    assert up == sorted(up) and down == sorted(up, reverse=True)
    _only_local_files(o)


def test_png_and_svg_exports(open_page, pages):
    o = open_page(pages["seq2seq"].as_uri())
    name, png = _download(o, "export-png")
    assert name.endswith(".png") and png[:8] == b"\x89PNG\r\n\x1a\n"
    name, svg = _download(o, "export-svg")
    assert name.endswith(".svg")
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG_NS}svg"
    texts = {t.text for t in root.iter(f"{SVG_NS}text")}
    assert {"Park", "football", "cross-attention \u00b7 layer 0 \u00b7 head 0"} <= texts
    assert len(list(root.iter(f"{SVG_NS}rect"))) > len(SOURCE) * len(TARGET) // 2
    _only_local_files(o)


def test_512_tokens_render_fast_and_decode_lazily(open_page, pages, shots):
    start = time.perf_counter()
    o = open_page(pages["causal512"].as_uri(), width=1280, height=480)
    elapsed = time.perf_counter() - start
    assert elapsed < 5.0, f"512-token page took {elapsed:.1f} s to render"
    p = o.page
    assert p.locator("[data-testid=query-token]").count() == 512
    total = 8 * 3  # layers x (heads blob, average, rollout)
    before = p.evaluate("AK.decodeCount")
    assert before < total, "every layer was decoded before being shown"
    p.locator(
        "[data-testid=thumb][data-layer='7'][data-view='rollout']"
    ).scroll_into_view_if_needed()
    p.wait_for_selector("[data-layer='7'][data-view='rollout'][data-drawn='1']", state="attached")
    assert p.evaluate("AK.decodeCount") > before
    p.hover("[data-testid=query-token][data-index='300']")
    assert 299 in o.indices("[data-testid=key-token].hl")  # head 0 looks one token back
    strip = p.locator("[data-testid=key-tokens]")
    assert strip.evaluate("e => e.scrollTop") > 0  # scrolled to the highlighted key
    _screenshot(o, shots, "causal-512.png")
    _, svg = _download(o, "export-svg")
    assert ET.fromstring(svg).find(f"{SVG_NS}image") is not None  # cells as one image
    _only_local_files(o)


@pytest.mark.parametrize("name", ["rnn", "mlm"])
def test_other_kinds_render(open_page, pages, name):
    o = open_page(pages[name].as_uri())
    groups = o.page.locator("[data-testid=group-tab]").count()
    assert groups == 1 and o.bigmap()["ready"] == "1"
    if name == "mlm":
        assert o.page.is_hidden("[data-testid=output]")  # nothing generated
        for i in range(5):
            o.page.hover(f"[data-testid=query-token][data-index='{i}']")
            assert o.indices("[data-testid=key-token].hl") == [(i + 2) % 5]
    _only_local_files(o)


class _Stub(http.server.BaseHTTPRequestHandler):
    payload: dict[str, Any] = {}
    posted: list[Any] = []

    def _send(self, body: bytes, ctype: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        self._send(render_page(None, api_url="/translate").encode(), "text/html; charset=utf-8")

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.posted.append(body)
        answer = {"error": "empty text"} if body["text"] == ["fail"] else {"explore": self.payload}
        self._send(json.dumps(answer).encode(), "application/json")

    def log_message(self, *args: Any) -> None:
        pass


def test_served_mode_translate_round_trip(open_page, shots):
    _Stub.payload = build_payload(seq2seq_example())
    _Stub.posted = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Stub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/"
        o = open_page(url, wait=False)
        p = o.page
        assert p.is_hidden("[data-testid=app]")
        p.fill("[data-testid=input-text]", "fail")
        p.click("[data-testid=translate]")
        p.wait_for_selector("[data-testid=status].error")
        assert "empty text" in p.inner_text("[data-testid=status]")
        p.fill("[data-testid=input-text]", "Zwei junge Männer spielen im Park Fußball.")
        p.fill("[data-testid=nbest-count]", "3")
        p.click("[data-testid=translate]")
        p.wait_for_selector(READY)
        assert p.inner_text("[data-testid=output]") == "Two young men play football in the park ."
        assert p.locator("[data-testid=nbest-item]").count() == 3
        assert _Stub.posted[-1] == {
            "text": ["Zwei junge Männer spielen im Park Fußball."],
            "beam": 4,
            "nbest": 3,
            "explore": True,
        }
        _screenshot(o, shots, "served.png")
        hosts = {urlsplit(u).hostname for u in o.requests}
        assert hosts == {"127.0.0.1"}, o.requests
        assert o.errors == []
    finally:
        server.shutdown()
        server.server_close()
