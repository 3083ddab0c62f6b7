"""The explorer page: one self-contained HTML file, all JS and CSS inline, no network.

:func:`render_page` fills ``assets/explorer.html`` with the stylesheet, the
scripts (concatenated in ``SCRIPTS`` order), a small config and the payload
(see :mod:`attnkit.visualize.explorer.payload` for its fields). The page works
opened from disk (``file://``): it loads no fonts, scripts or images from
anywhere, and its Content-Security-Policy forbids the browser to, except
``connect-src`` to the API in served mode.

Two modes:

* exported: ``render_page(build_payload(example))``; the embedded payload renders
  at load. Write the string to a ``.html`` file and open it.
* served: ``render_page(None, api_url="/translate")``; the page shows a text box
  and a button (labelled by ``form``: "Translate" unless told otherwise) that
  POSTs ``{"text": [text], "beam": 4, "nbest": N, "explore": true}`` to
  ``api_url`` and renders the ``"explore"`` payload of the JSON answer. Serve
  the page from the same origin as the API (a relative ``api_url``); an absolute
  URL on another origin needs CORS headers from that server.
"""

from __future__ import annotations

import html
import re
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path
from urllib.parse import urlsplit

from attnkit import jsonio

__all__ = ["SCRIPTS", "ServedForm", "render_page", "write_page"]


@dataclass(frozen=True)
class ServedForm:
    """The served page's text box: what its button says and does (by model kind).

    ``search``: show the beam and n-best inputs (translation only). ``note``: a line
    the status bar shows when the page opens and under every answer (what the page
    shows of the model's work and what it does not; empty: none).
    """

    action: str = "Translate"
    placeholder: str = "Text to translate (Ctrl+Enter)"
    busy: str = "translating\u2026"
    search: bool = True
    note: str = ""


SCRIPTS = ("data.js", "draw.js", "views.js", "app.js")
_PLACEHOLDER = re.compile(r"__(CSP|TITLE|STYLE|CONFIG|PAYLOAD|SCRIPT)__")


def _asset(name: str) -> str:
    return resources.files("attnkit.visualize.explorer").joinpath("assets", name).read_text("utf-8")


def _script_json(value: object) -> str:
    """JSON safe inside ``<script type="application/json">``.

    ``<`` only occurs inside JSON strings, where ``\\u003c`` means the same, so no
    token text can close the script element.
    """
    return jsonio.dumps(value, ensure_ascii=False, separators=(",", ":")).replace("<", "\\u003c")


def _csp(api_url: str | None) -> str:
    connect = "'none'"
    if api_url:
        parts = urlsplit(api_url)
        connect = "'self'"
        if parts.scheme in ("http", "https") and parts.netloc:
            connect += f" {parts.scheme}://{parts.netloc}"
    return (
        "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
        f"img-src data: blob:; connect-src {connect}; base-uri 'none'; form-action 'none'"
    )


def render_page(
    payload: dict[str, object] | None,
    *,
    api_url: str | None = None,
    title: str | None = None,
    form: ServedForm | None = None,
) -> str:
    """Return the explorer as one HTML string.

    Args:
        payload: a dict from :func:`~attnkit.visualize.explorer.payload.build_payload`
            to show at load, or ``None`` (served mode, or an empty page).
        api_url: where the form's button POSTs; ``None`` hides the text box.
        form: the button's label, the box's placeholder (default: translation's).
        title: the browser tab's title (default: the payload's title).

    Raises:
        ValueError: ``payload`` is not an explorer payload.
    """
    if payload is not None and payload.get("format") != "attnkit.explorer":
        raise ValueError("payload: not an attnkit.explorer payload (use build_payload)")
    scripts = "\n".join(_asset(name) for name in SCRIPTS)
    if "</script" in scripts.lower():  # would end the inline element early
        raise RuntimeError("an explorer script contains '</script'")
    page_title = title or (payload or {}).get("title") or "attention explorer"
    fills = {
        "__CSP__": html.escape(_csp(api_url), quote=False).replace('"', "&quot;"),
        "__TITLE__": html.escape(f"attnkit: {page_title}"),
        "__STYLE__": _asset("explorer.css"),
        "__CONFIG__": _script_json({"api_url": api_url, "form": asdict(form or ServedForm())}),
        "__PAYLOAD__": _script_json(payload),
        "__SCRIPT__": scripts,
    }
    # One pass: text put in (token strings, scripts) is never scanned for placeholders.
    return _PLACEHOLDER.sub(lambda m: fills[m.group(0)], _asset("explorer.html"))


def write_page(path: str | Path, payload: dict[str, object], *, title: str | None = None) -> Path:
    """Write an exported (offline) page to ``path`` and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_page(payload, title=title), encoding="utf-8")
    return path
