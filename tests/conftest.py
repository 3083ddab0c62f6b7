"""Shared fixtures: tiny random models, deterministic seeds, data paths, a headless browser.

The browser tests (``tests/visualize``, ``tests/serve``) need the Debian
``chromium`` package and the ``playwright`` Python package (Playwright's own
browser download is never used)::

    apt-get install -y chromium
    pip install playwright
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

# Real corpora live beside the checkout (never copied into the repo).
SHARED_DATA = Path(os.environ.get("ATTNKIT_DATA", Path(__file__).parents[2] / "shared" / "data"))


@pytest.fixture(scope="session", autouse=True)
def _data_cache(tmp_path_factory) -> Iterator[None]:
    """Prepared training data (`attnkit train` caches it) goes to a folder of this test
    session, never the user's ~/.cache; subprocesses inherit the variable."""
    if os.environ.get("ATTNKIT_CACHE_DIR"):
        yield
        return
    os.environ["ATTNKIT_CACHE_DIR"] = str(tmp_path_factory.mktemp("attnkit-cache"))
    yield
    del os.environ["ATTNKIT_CACHE_DIR"]


@pytest.fixture(autouse=True)
def _machine_not_busy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Kernel choices are kept (``ChoiceCache.put``) whatever the load of the machine that
    runs the tests; ``tests/kernels/test_machine_choice.py`` checks the busy case."""
    from attnkit.kernels import machine_choice

    monkeypatch.setattr(machine_choice, "machine_busy", lambda: False)


@pytest.fixture(scope="session", autouse=True)
def _fp32_linears_packed() -> Iterator[None]:
    """``--precision fp32`` packs its linears in every test (as it did before the
    per-machine choice, ``attnkit.kernels.fp32_choice``, whose own tests unset this):
    the tests that check which kernel ran must not depend on the machine's timing."""
    previous = os.environ.get("ATTNKIT_FP32_LINEARS")
    os.environ["ATTNKIT_FP32_LINEARS"] = "packed"
    yield
    if previous is None:
        del os.environ["ATTNKIT_FP32_LINEARS"]
    else:
        os.environ["ATTNKIT_FP32_LINEARS"] = previous


@pytest.fixture(scope="session", autouse=True)
def _strict_json_responses() -> Iterator[None]:
    """Every HTTP response body a test reads with ``.json()`` (``TestClient``, httpx;
    the server tests) is parsed as strict JSON: ``NaN``/``Infinity``, which Python's
    parser accepts and every other refuses, fail the test (``attnkit.jsonio``)."""
    import httpx

    from attnkit.jsonio import loads_strict

    original = httpx.Response.json

    def strict(self: httpx.Response, **kwargs: object) -> object:
        return loads_strict(self.content) if not kwargs else original(self, **kwargs)

    httpx.Response.json = strict  # type: ignore[method-assign]
    yield
    httpx.Response.json = original  # type: ignore[method-assign]


@pytest.fixture(autouse=True)
def _seed_and_one_thread():
    # Test tensors are tiny: intra-op threads only add wake-up latency (on a
    # busy 2-core machine, ~100x per op). Restored after each test.
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    return SHARED_DATA


@dataclass(frozen=True)
class QuickstartRun:
    out: Path  # the quickstart's --out directory (a checkpoint `load_model` reads)
    stdout: str


@pytest.fixture(scope="session")
def quickstart_run(tmp_path_factory) -> QuickstartRun:
    """One quickstart on a reduced budget, shared by the tests that need a
    trained quickstart-size model (tests/cli/test_quickstart.py, tests/quantize).
    300 steps end it (about a minute on 2 quiet cores); 4 minutes is a ceiling."""
    from attnkit.cli.main import main

    out = tmp_path_factory.mktemp("quickstart") / "qs"
    captured = io.StringIO()
    with contextlib.redirect_stdout(captured):
        code = main(["quickstart", "--out", str(out), "--minutes", "4", "--max-steps", "300",
                     "--test-size", "100", "--no-progress"])  # fmt: skip
    assert code == 0
    return QuickstartRun(out, captured.getvalue())


CHROMIUM = Path("/usr/bin/chromium")
# Without the background-networking flags Chromium phones Google hosts at start-up.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="session")
def chromium_path() -> Path:
    if not CHROMIUM.exists():
        pytest.fail(
            f"{CHROMIUM} is missing: the explorer's browser tests need Debian's Chromium "
            "(apt-get install -y chromium) and `pip install playwright`",
            pytrace=False,
        )
    return CHROMIUM


# Per module, not per session: Playwright's sync API keeps an event loop running in the
# main thread while it is open, so a session-wide browser made every later test that calls
# asyncio.run (tests/serve/test_engine_translator.py, when it ran after test_serve_browser.py) fail.
@pytest.fixture(scope="module")
def browser(chromium_path: Path) -> Iterator[object]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("the explorer's browser tests need `pip install playwright`", pytrace=False)
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(chromium_path), args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def fresh_dynamo():
    """Dynamo's caches emptied before a test that compiles a decode step: compiled steps
    share one code object, so the models and shapes earlier tests compiled count towards
    ``torch._dynamo.config.recompile_limit`` (8), past which a ``fullgraph`` step fails."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
