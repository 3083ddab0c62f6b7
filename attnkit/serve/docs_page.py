"""The API's description page at ``/docs``, rendered on the server: no script, no CDN.

FastAPI's own ``/docs`` (Swagger UI) and ``/redoc`` load their scripts and
styles from a CDN, so offline they are blank and online they make the browser
fetch from a third party. This page is plain HTML written from the same
OpenAPI document (``/openapi.json``): every operation with its summary, its
request body's fields (type, default, limits, description) and its answer's
schema name. Its Content-Security-Policy lets it load nothing at all.

``render_docs(openapi)`` is a pure function of the document, so the page is
rendered once per server.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

__all__ = ["CSP", "render_docs"]

CSP = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
_STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; margin: 2rem auto; max-width: 60rem; padding: 0 1rem;
       color: #1d1d1f; }
code, .path { font-family: ui-monospace, monospace; }
h2 { margin-top: 2rem; border-bottom: 1px solid #ddd; }
.method { display: inline-block; min-width: 3.5rem; font-weight: 700; color: #fff;
          border-radius: 4px; padding: 0 .4rem; margin-right: .5rem; text-align: center; }
.GET { background: #2b7bb9; } .POST { background: #2f8f46; }
table { border-collapse: collapse; width: 100%; margin: .5rem 0; }
th, td { border: 1px solid #ddd; padding: .25rem .5rem; text-align: left; vertical-align: top; }
th { background: #f4f4f6; } .muted { color: #666; }
"""
_LIMITS = (
    ("minimum", ">= {}"), ("exclusiveMinimum", "> {}"), ("maximum", "<= {}"),
    ("exclusiveMaximum", "< {}"), ("minLength", "{} characters at least"),
    ("maxLength", "{} characters at most"), ("minItems", "{} items at least"),
    ("maxItems", "{} items at most"),
)  # fmt: skip


def _e(x: object) -> str:
    return html.escape(str(x))


class _Schemas:
    """``$ref`` resolution and one-line type names over the document's components.

    The document is FastAPI's ``app.openapi()`` (a ``dict[str, Any]``): its values are
    read as what OpenAPI says they are, hence ``Any`` here (as for ASGI messages in ``limits``).
    """

    def __init__(self, openapi: Mapping[str, Any]) -> None:
        self.components: Mapping[str, Any] = openapi.get("components", {}).get("schemas", {})

    def resolve(self, schema: Mapping[str, Any]) -> Mapping[str, Any]:
        ref = schema.get("$ref")
        if isinstance(ref, str):
            return self.resolve(self.components.get(ref.rsplit("/", 1)[-1], {}))
        return schema

    def type_name(self, schema: Mapping[str, Any]) -> str:
        ref = schema.get("$ref")
        if isinstance(ref, str):
            return ref.rsplit("/", 1)[-1]
        for key in ("anyOf", "oneOf"):
            if key in schema:
                return " | ".join(self.type_name(s) for s in schema[key])
        if "const" in schema:
            return repr(schema["const"])
        if "enum" in schema:
            return " | ".join(repr(v) for v in schema["enum"])
        kind = schema.get("type", "any")
        if kind == "array":
            return f"list of {self.type_name(schema.get('items', {}))}"
        if kind == "object" and "additionalProperties" in schema:
            extra = schema["additionalProperties"]
            return f"map to {self.type_name(extra)}" if isinstance(extra, dict) else "object"
        return {"integer": "int", "number": "float", "string": "str", "boolean": "bool"}.get(
            str(kind), str(kind)
        )

    def limits(self, schema: Mapping[str, Any]) -> str:
        found = [fmt.format(schema[k]) for k, fmt in _LIMITS if k in schema]
        for key in ("anyOf", "oneOf"):
            for option in schema.get(key, ()):
                found += [fmt.format(option[k]) for k, fmt in _LIMITS if k in option]
        return ", ".join(found)

    def fields(self, schema: Mapping[str, Any]) -> str:
        """A table of an object schema's properties."""
        schema = self.resolve(schema)
        properties: Mapping[str, Any] = schema.get("properties", {})
        if not properties:
            return ""
        required = set(schema.get("required", ()))
        rows = []
        for name, prop in properties.items():
            default = "required" if name in required else _e(repr(prop.get("default")))
            rows.append(
                f"<tr><td><code>{_e(name)}</code></td><td>{_e(self.type_name(prop))}</td>"
                f"<td>{default}</td><td>{_e(self.limits(prop))}</td>"
                f"<td>{_e(prop.get('description', ''))}</td></tr>"
            )
        head = "<tr><th>field</th><th>type</th><th>default</th><th>limits</th><th>meaning</th></tr>"
        return f"<table>{head}{''.join(rows)}</table>"


def _operation(method: str, path: str, op: Mapping[str, Any], schemas: _Schemas) -> str:
    out = [
        f'<h2 id="{_e(method.lower() + path)}"><span class="method {method}">{method}</span>'
        f'<span class="path">{_e(path)}</span></h2>'
    ]
    description = op.get("description") or op.get("summary") or ""
    if description:
        out.append(f"<p>{_e(description)}</p>")
    body = op.get("requestBody", {}).get("content", {}).get("application/json", {})
    if "schema" in body:
        out.append(f"<p>Body: <code>{_e(schemas.type_name(body['schema']))}</code></p>")
        out.append(schemas.fields(body["schema"]))
    ok = op.get("responses", {}).get("200", {}).get("content", {}).get("application/json", {})
    if "schema" in ok and "$ref" in ok["schema"]:
        out.append(f"<p>Answer: <code>{_e(schemas.type_name(ok['schema']))}</code></p>")
        out.append(schemas.fields(ok["schema"]))
    return "\n".join(out)


def render_docs(openapi: Mapping[str, Any]) -> str:
    """The description page of the OpenAPI document ``openapi``, as one HTML string."""
    info = openapi.get("info", {})
    schemas = _Schemas(openapi)
    index, sections = [], []
    for path, item in openapi.get("paths", {}).items():
        for method, op in item.items():
            m, summary = method.upper(), _e(op.get("summary", ""))
            index.append(
                f'<li><a href="#{_e(method + path)}"><span class="method {m}">{m}</span></a>'
                f'<code>{_e(path)}</code> <span class="muted">{summary}</span></li>'
            )
            sections.append(_operation(m, path, op, schemas))
    title = _e(info.get("title", "API"))
    summary = _e(info.get("summary", ""))
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        f"<title>{title} API</title><style>{_STYLE}</style></head><body>"
        f'<h1>{title} API</h1><p class="muted">{summary}</p>'
        '<p>Errors are one-line JSON: <code>{"error": "field: what is wrong"}</code>; the '
        "OpenAI-compatible endpoints answer OpenAI's error object. The machine-readable "
        'description is <a href="/openapi.json"><code>/openapi.json</code></a>; '
        "<code>docs/serving.md</code> has examples.</p>"
        f"<ul>{''.join(index)}</ul>{''.join(sections)}</body></html>"
    )
