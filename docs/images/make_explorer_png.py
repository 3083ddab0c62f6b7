"""Remake ``docs/images/explorer.png``: the served explorer on a real checkpoint.

Starts ``attnkit serve`` on a trained checkpoint (e.g. ``attnkit quickstart``'s),
types a sentence into the page at / in headless Debian Chromium, hovers one
output token and saves the page. Needs the serve extra, ``playwright`` and
``/usr/bin/chromium``.

  python docs/images/make_explorer_png.py --checkpoint quickstart-out
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "bench"))

from serve_load import start_server  # noqa: E402

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]  # fmt: skip


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--text", default="six hundred seventy-five thousand four hundred thirty-two")
    p.add_argument("--hover", default="fünf", help="hover the first output token holding this")
    p.add_argument("--layer", default="0", help="cross-attention layer to show")
    p.add_argument("--head", default="3", help="head to show")
    p.add_argument("--out", default=str(HERE / "explorer.png"))
    args = p.parse_args()
    from playwright.sync_api import sync_playwright

    proc, url = start_server(args.checkpoint, [])
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(url + "/")
            page.fill("[data-testid=input-text]", args.text)
            page.click("[data-testid=translate]")
            page.wait_for_selector("[data-testid=bigmap][data-ready='1']")
            page.select_option("[data-testid=layer-select]", args.layer)
            page.select_option("[data-testid=head-select]", args.head)
            tokens = page.locator("[data-testid=query-token]")
            texts = tokens.all_inner_texts()
            hover = next((i for i, t in enumerate(texts) if args.hover in t), len(texts) // 2)
            tokens.nth(hover).hover()
            page.screenshot(path=args.out, full_page=True)
            print(f"wrote {args.out}: {page.inner_text('[data-testid=output]')!r}, "
                  f"hovering {tokens.nth(hover).inner_text()!r}")  # fmt: skip
            browser.close()
    finally:
        proc.terminate()
        proc.wait(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
