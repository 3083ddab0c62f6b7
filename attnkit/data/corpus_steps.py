"""The steps that turn a corpus's upstream files into the layout the configs read.

Each step takes the bytes of the file so far (or, first, the path of the
download or of a folder inside an unpacked archive) and its arguments from
the corpus table, and returns the new bytes. They are named in
``corpora.json`` (``"steps": [{"op": "gunzip"}]``), so the table says how each
installed file was made from its source, and a new corpus needs no code unless
its conversion is new.

* ``gunzip``: decompress (at most ``MAX_EXPANDED`` bytes);
* ``lf``: CRLF line endings become LF;
* ``header``: the first line ``old`` becomes ``new`` (anything else: an error);
* ``columns``: of each tab-separated line keep the fields ``keep`` (0-based),
  under a ``header`` line;
* ``aeslc``: a folder of AESLC ``.subject`` files (``BODY\\n\\n@subject\\nSUBJECT``,
  then ``@ann0``..``@ann2`` in dev/test) becomes JSON lines ``{"text", "summary",
  "id"[, "annotations"]}`` in file-name order;
* ``squad_articles``: of a SQuAD JSON file keep the last ``tail`` articles
  (``part: tail``) or all the others (``part: head``), as ``{"data", "version"}``.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from attnkit import jsonio
from attnkit.errors import DataError

MAX_EXPANDED = 1 << 31  # bytes a gunzip step may produce (2 GiB): a gzip bomb stops here

Value = bytes | Path
StepFn = Callable[[Value, dict[str, object]], bytes]


def _bytes(value: Value) -> bytes:
    return value.read_bytes() if isinstance(value, Path) else value


def gunzip(value: Value, args: dict[str, Any]) -> bytes:
    limit = int(args.get("max_bytes", MAX_EXPANDED))
    out = bytearray()
    d = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    data = _bytes(value)
    try:
        while data:
            out += d.decompress(data, limit + 1 - len(out))
            if len(out) > limit:
                raise DataError(f"expands past {limit:,} bytes; not the expected file")
            data = d.unconsumed_tail
            if d.eof:
                break
    except zlib.error as e:
        raise DataError(f"not a valid gzip file ({e})") from None
    if not d.eof:
        raise DataError("the gzip stream is cut short")
    return bytes(out)


def lf(value: Value, args: dict[str, object]) -> bytes:
    return _bytes(value).replace(b"\r\n", b"\n")


def header(value: Value, args: dict[str, Any]) -> bytes:
    data = _bytes(value)
    first, sep, rest = data.partition(b"\n")
    old, new = args["old"].encode(), args["new"].encode()
    if first.rstrip(b"\r") != old:
        raise DataError(f"expected the first line {args['old']!r}, got {first[:80]!r}")
    return new + sep + rest


def columns(value: Value, args: dict[str, Any]) -> bytes:
    keep = [int(i) for i in args["keep"]]
    lines = [args["header"].encode()] if args.get("header") else []
    for number, line in enumerate(_bytes(value).split(b"\n"), 1):
        if not line:
            continue
        fields = line.split(b"\t")
        if len(fields) <= max(keep):
            raise DataError(f"line {number}: {len(fields)} tab-separated fields, expected "
                            f"more than {max(keep)}")  # fmt: skip
        lines.append(b"\t".join(fields[i] for i in keep))
    return b"".join(line + b"\n" for line in lines)


_SUBJECT, _ANNOTATIONS = "\n\n@subject\n", ("\n\n@ann0\n", "\n\n@ann1\n", "\n\n@ann2\n")


def aeslc(value: Value, args: dict[str, object]) -> bytes:
    if not isinstance(value, Path) or not value.is_dir():
        raise DataError("expected the folder of .subject files (an unpacked archive)")
    lines = []
    for path in sorted(value.glob("*.subject"), key=lambda p: p.name):
        text = path.read_bytes().decode("utf-8")
        body, found, rest = text.partition(_SUBJECT)
        if not found:
            raise DataError(f"{path.name}: no '@subject' line")
        record: dict[str, object] = {"text": body}
        if _ANNOTATIONS[0] in rest:
            subject, _, rest = rest.partition(_ANNOTATIONS[0])
            a0, _, rest = rest.partition(_ANNOTATIONS[1])
            a1, _, a2 = rest.partition(_ANNOTATIONS[2])
            record.update(summary=subject, id=path.name.removesuffix(".subject"),
                          annotations=[a0, a1, a2])  # fmt: skip
        else:
            record.update(summary=rest, id=path.name.removesuffix(".subject"))
        lines.append(jsonio.dumps(record, ensure_ascii=False) + "\n")
    if not lines:
        raise DataError(f"{value.name}: no .subject files")
    return "".join(lines).encode("utf-8")


def squad_articles(value: Value, args: dict[str, Any]) -> bytes:
    try:
        squad = json.loads(_bytes(value))
        articles = squad["data"]
    except (ValueError, KeyError, TypeError):
        raise DataError("not a SQuAD JSON file (no 'data' list)") from None
    tail = int(args["tail"])
    if not isinstance(articles, list) or len(articles) <= tail:
        raise DataError(f"expected more than {tail} articles")
    part = articles[-tail:] if args["part"] == "tail" else articles[:-tail]
    out = {"data": part, "version": squad.get("version", "1.1")}
    return jsonio.dumps(out, ensure_ascii=False).encode("utf-8")


# op name -> step; the corpus table names these (a plain dict: registries at the edges)
STEPS: dict[str, StepFn] = {
    "gunzip": gunzip,
    "lf": lf,
    "header": header,
    "columns": columns,
    "aeslc": aeslc,
    "squad_articles": squad_articles,
}
