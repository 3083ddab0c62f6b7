"""A headless Debian Chromium for the explorer's browser tests.

They need the Debian ``chromium`` package and the ``playwright`` Python package
(Playwright's own browser download is never used)::

    apt-get install -y chromium
    pip install playwright
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

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


@pytest.fixture(scope="session")
def browser(chromium_path: Path) -> Iterator[object]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("the explorer's browser tests need `pip install playwright`", pytrace=False)
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(chromium_path), args=CHROMIUM_ARGS)
        yield b
        b.close()
