"""The attention explorer: a compact JSON payload and a self-contained HTML page.

``build_payload(ExplorerExample(...))`` turns tokens and attention weights into
JSON; ``render_page(payload)`` returns an offline HTML page that shows it, and
``render_page(None, api_url=...)`` the served page with a text box.
"""

from attnkit.visualize.explorer.page import render_page, write_page
from attnkit.visualize.explorer.payload import (
    AttentionGroup,
    ExplorerExample,
    Hypothesis,
    build_payload,
    decode_blob,
    encode_blob,
)

__all__ = [
    "AttentionGroup",
    "ExplorerExample",
    "Hypothesis",
    "build_payload",
    "decode_blob",
    "encode_blob",
    "render_page",
    "write_page",
]
