"""Hugging Face ``datasets`` as a data source: a split exported once into the JSON lines the
file readers read, so every task and loading path (prepared, memory, streaming) takes it.

``export_split(settings, split, fmt, ...)`` loads the split with
``datasets.load_dataset`` (a Hub name, or a builder such as ``parquet``,
``csv``, ``json`` with ``data_files``; ``streaming`` reads it record by record
without ``datasets``' own Arrow copy; any split slicing ``datasets`` supports,
such as ``train[:10%]``, or ``train[:1000]`` when streaming), turns each record
into one JSON line as the task's reader wants it (``FORMATS``) and writes them,
in the dataset's order, into the attnkit cache (``attnkit.data.cache.ensure``:
atomic, keyed by the dataset's own fingerprint, reused by later runs and
resumes). A record longer than ``MAX_RECORD_BYTES`` is an error naming the row,
as a file line past the readers' bound is. A materialised copy, not a live
stream, so a resumed run re-reads exactly the records it read before.

``FORMATS`` is the extension point: a task format names its column roles (with
the column names tried when the config names none) and how one record becomes
one JSON line. Here: ``pairs`` (translation: ``src``/``tgt`` columns, or a
``translation`` column of ``{lang: text}`` dicts read with the run's
``src_lang``/``tgt_lang``), ``text`` (LM/MLM) and ``labelled`` (classification:
``label`` and ``text`` (+ ``text_b``); a ``ClassLabel``'s names become the labels).
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from attnkit import jsonio
from attnkit.data.cache import FileIdentity, Log, ensure, file_identity
from attnkit.errors import ConfigError, DataError

# Bytes of one exported record (one JSON line). NOTE for the integrator: the bounded
# readers (issue 42) read the exported file and apply their own line ceiling; this check
# names the dataset's row instead of the cache file's line.
MAX_RECORD_BYTES = 1 << 24
FIELD = "data.hf_dataset"


class HFDatasetSettings(Protocol):
    """The ``data.hf_dataset`` section of a run config."""

    @property
    def path(self) -> str: ...
    @property
    def name(self) -> str | None: ...
    @property
    def data_files(self) -> str | list[str] | dict[str, object] | None: ...
    @property
    def revision(self) -> str | None: ...
    @property
    def streaming(self) -> bool: ...
    @property
    def columns(self) -> dict[str, str] | None: ...


Row = Mapping[str, object]  # a dataset record


@dataclass(frozen=True)
class Columns:
    """The dataset's column for each role, its features (``None`` when streaming without
    them), and the languages a ``translation`` column is read with."""

    of: dict[str, str]
    features: Mapping[str, object] | None
    langs: tuple[str, str] = ("src", "tgt")


@dataclass(frozen=True)
class RecordFormat:
    """How one dataset record becomes one JSON line of the file the task's reader reads.

    ``roles``: required roles, each with the column names tried when the config
    names none; ``alternatives``: other role sets that can stand for all of
    ``roles`` (translation: one ``translation`` column for ``src`` + ``tgt``);
    ``optional``: roles used when present.
    """

    roles: dict[str, tuple[str, ...]]
    make: Callable[[Row, Columns], dict[str, object]]
    optional: dict[str, tuple[str, ...]] = field(default_factory=dict)
    alternatives: tuple[dict[str, tuple[str, ...]], ...] = ()

    def known(self) -> list[str]:
        names = [*self.roles, *self.optional]
        return names + [r for alt in self.alternatives for r in alt if r not in names]


def _string(row: Row, cols: Columns, role: str) -> str:
    value = row[cols.of[role]]
    if not isinstance(value, str):
        got = "null" if value is None else type(value).__name__
        raise DataError(f"column {cols.of[role]!r} ({role}) must hold text, got {got}")
    return value


def _pair(row: Row, cols: Columns) -> dict[str, object]:
    if "translation" not in cols.of:
        return {"src": _string(row, cols, "src"), "tgt": _string(row, cols, "tgt")}
    column = cols.of["translation"]
    pair = row[column]
    if not isinstance(pair, Mapping):
        raise DataError(f"column {column!r} must hold {{language: text}}, got "
                        f"{type(pair).__name__}")  # fmt: skip
    out = {}
    for side, lang in zip(("src", "tgt"), cols.langs):
        if not isinstance(pair.get(lang), str):
            raise DataError(f"column {column!r} has no {lang!r} text (data.{side}_lang); its "
                            f"languages: {', '.join(sorted(pair))}")  # fmt: skip
        out[side] = pair[lang]
    return out


def _text(row: Row, cols: Columns) -> dict[str, object]:
    return {"text": _string(row, cols, "text")}


def _label_value(row: Row, cols: Columns) -> str | int:
    column = cols.of["label"]
    value = row[column]
    feature = cols.features.get(column) if cols.features is not None else None
    names = getattr(feature, "names", None)
    if names and isinstance(value, int) and not isinstance(value, bool):
        if not 0 <= value < len(names):
            raise DataError(f"column {column!r}: label {value} is not one of its "
                            f"{len(names)} ClassLabel names")  # fmt: skip
        return str(names[value])
    if isinstance(value, bool) or not isinstance(value, str | int):
        got = "null" if value is None else repr(value)
        raise DataError(f"column {column!r} (label) must hold a string or an integer, got {got}")
    return value


def _labelled(row: Row, cols: Columns) -> dict[str, object]:
    record: dict[str, object] = {
        "label": _label_value(row, cols),
        "text": _string(row, cols, "text"),
    }
    if "text_b" in cols.of:
        record["text_b"] = _string(row, cols, "text_b")
    return record


_TEXT_COLUMNS = ("text", "sentence", "content", "document", "sentence1", "text_a")

# format name -> how its records are read; tasks choose a format (training/tasks/dataset_source)
FORMATS: dict[str, RecordFormat] = {
    "pairs": RecordFormat(
        roles={"src": ("src", "source"), "tgt": ("tgt", "target")},
        alternatives=({"translation": ("translation",)},),
        make=_pair,
    ),
    "text": RecordFormat(roles={"text": _TEXT_COLUMNS}, make=_text),
    "labelled": RecordFormat(
        roles={"label": ("label", "labels", "class"), "text": _TEXT_COLUMNS},
        optional={"text_b": ("text_b", "sentence2")},
        make=_labelled,
    ),
}


# -- loading ---------------------------------------------------------------------------

_SPLIT = re.compile(r"([\w.-]+)(?:\[(\d*)(%?):(\d*)(%?)\])?")


def _stream_slice(split: str) -> tuple[str, int, int | None]:
    """``(split, start, stop)`` of ``train[:1000]`` for a streamed dataset."""
    found = _SPLIT.fullmatch(split.replace(" ", ""))
    if found is None or found.group(3) or found.group(5):
        raise ConfigError(
            f"{FIELD}.split: {split!r} with streaming: true; a stream is sliced by rows "
            "(train[:1000], train[500:2000]); percentages and combined splits need "
            "streaming: false"
        )
    start = int(found.group(2) or 0)
    stop = int(found.group(4)) if found.group(4) else None
    return found.group(1), start, stop


def _describe(s: HFDatasetSettings) -> str:
    return s.path + (f" ({s.name})" if s.name else "")


def _load(s: HFDatasetSettings, split: str) -> object:
    try:
        import datasets
    except ImportError:
        raise ConfigError(
            f"{FIELD}: needs the 'datasets' package (pip install 'attnkit[train]')"
        ) from None
    base, start, stop = _stream_slice(split) if s.streaming else (split, 0, None)
    try:
        ds = datasets.load_dataset(s.path, s.name, split=base, data_files=s.data_files,
                                   revision=s.revision, streaming=s.streaming)  # fmt: skip
    except Exception as e:  # datasets raises many kinds (FileNotFound, ConnectionError, ...)
        text = " ".join(str(e).split())[:400]
        what = "split" if "split" in text.lower() else "path"
        raise DataError(f"{FIELD}.{what}: cannot load {_describe(s)} split {split!r}: "
                        f"{type(e).__name__}: {text}") from None  # fmt: skip
    if s.streaming and (start or stop is not None):
        ds = ds.skip(start) if start else ds
        ds = ds.take(stop - start) if stop is not None else ds
    return ds


def _column_names(ds: Any) -> list[str]:
    names = getattr(ds, "column_names", None)
    if names is None:  # a stream without declared features: the first record's keys
        first = next(iter(ds), None)
        names = list(first) if first is not None else []
    return list(names)


def resolve_columns(
    fmt: RecordFormat, given: Mapping[str, str] | None, names: Sequence[str], where: str
) -> dict[str, str]:
    """The column for each role: as ``given``, else the first default name present."""
    given = dict(given or {})
    for role in given:
        if role not in fmt.known():
            raise ConfigError(f"{FIELD}.columns.{role}: not a column role here "
                              f"(roles: {', '.join(fmt.known())})")  # fmt: skip
    for role, column in given.items():
        if column not in names:
            raise ConfigError(f"{FIELD}.columns.{role}: {where} has no column {column!r} "
                              f"(columns: {', '.join(names)})")  # fmt: skip

    def pick(roles: Mapping[str, tuple[str, ...]]) -> dict[str, str] | None:
        out = {}
        for role, defaults in roles.items():
            column = given.get(role) or next((c for c in defaults if c in names), None)
            if column is None:
                return None
            out[role] = column
        return out

    # a role set the config names wins; otherwise the first whose default columns exist
    candidates = [*fmt.alternatives, fmt.roles]
    named = [roles for roles in candidates if set(roles) & set(given)]
    for roles in named or candidates:
        chosen = pick(roles)
        if chosen is not None:
            for role, defaults in fmt.optional.items():
                extra = given.get(role) or next((c for c in defaults if c in names), None)
                if extra is not None:
                    chosen[role] = extra
            return chosen
    missing = [r for r in fmt.roles if r not in given]
    raise ConfigError(
        f"{FIELD}.columns: {where} has no column for {', '.join(missing)}; name them "
        f"(columns: {{{', '.join(f'{r}: ...' for r in missing)}}}); its columns: "
        f"{', '.join(names)}"
    )


# -- exporting ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ExportedSplit:
    """A split written as JSON lines: the file, its record count, and the label names
    a ``ClassLabel`` column declares (in its order), if any."""

    path: Path
    records: int
    label_names: tuple[str, ...] | None


def _local_files(data_files: Any) -> list[FileIdentity]:
    """Identities (path, size, mtime) of the local files named in ``data_files``."""
    if data_files is None:
        return []
    values: Iterable[Any]
    if isinstance(data_files, Mapping):
        values = data_files.values()
    elif isinstance(data_files, str):
        values = [data_files]
    else:
        values = data_files
    paths = [v for item in values for v in ([item] if isinstance(item, str) else item)]
    return [file_identity(Path(p)) for p in paths if Path(p).is_file()]


def _lines(ds: Any, fmt: RecordFormat, cols: Columns, where: str) -> Iterator[bytes]:
    for i, row in enumerate(ds):
        try:
            line = jsonio.dumps(fmt.make(row, cols), ensure_ascii=False).encode("utf-8") + b"\n"
        except DataError as e:
            raise DataError(f"{where} row {i}: {e}") from None
        if len(line) > MAX_RECORD_BYTES:
            raise DataError(f"{where} row {i}: {len(line):,} bytes, more than the "
                            f"{MAX_RECORD_BYTES:,} a record may have")  # fmt: skip
        yield line


def export_split(
    settings: HFDatasetSettings,
    split: str,
    format_name: str,
    *,
    root: Path,
    langs: tuple[str, str] = ("src", "tgt"),
    log: Log | None = None,
) -> ExportedSplit:
    """``split`` of the dataset as JSON lines in ``format_name`` (see the module doc), cached."""
    fmt = FORMATS[format_name]
    where = f"{_describe(settings)} split {split!r}"
    ds = _load(settings, split)
    names = _column_names(ds)
    features = getattr(ds, "features", None)
    of = resolve_columns(fmt, settings.columns, names, where)
    cols = Columns(of, features, langs)
    label = of.get("label")
    feature = features.get(label) if features is not None and label else None
    declared = getattr(feature, "names", None)  # a ClassLabel's names, in their order
    label_names = tuple(str(n) for n in declared) if declared else None
    fingerprint = {
        "dataset": {"path": settings.path, "name": settings.name, "split": split,
                    "revision": settings.revision, "streaming": settings.streaming,
                    "data_files": json.loads(jsonio.dumps(settings.data_files, default=str))},
        "fingerprint": getattr(ds, "_fingerprint", None),  # datasets' own: the data it read
        "inputs": _local_files(settings.data_files),
        "format": format_name, "columns": of, "langs": list(langs),
    }  # fmt: skip

    def build(tmp: Path) -> dict[str, object]:
        start, count = time.perf_counter(), 0
        with open(tmp / "records.jsonl", "wb") as f:
            for line in _lines(ds, fmt, cols, where):
                f.write(line)
                count += 1
            f.flush()
            os.fsync(f.fileno())
        if count == 0:
            raise DataError(f"{where}: no records")
        if log:
            log(f"exported {count:,} records of {where} in {time.perf_counter() - start:.1f} s")
        return {"records": count}

    directory, manifest = ensure(root, "hf_dataset", fingerprint, build, log=log)
    return ExportedSplit(directory / "records.jsonl", int(manifest["records"]), label_names)
