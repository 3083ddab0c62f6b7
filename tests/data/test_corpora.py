"""The corpus table of ``attnkit data get`` (well-formed, honest about what it pins) and the
steps that convert upstream files into the configs' layout."""

from __future__ import annotations

import gzip
import hashlib
import json
import re
from pathlib import Path

import pytest

from attnkit.data.corpora import MIRROR_ENV, load_table
from attnkit.data.corpus_steps import STEPS
from attnkit.errors import DataError

# What each corpus must install: the files the configs and the task readers name.
LAYOUT = {
    "multi30k": {"train.de", "train.en", "valid.de", "valid.en", "test2016.de", "test2016.en"},
    "tinyshakespeare": {"input.txt"},
    "sst2": {"train.tsv", "dev.tsv"},
    "conll2003": {"train.txt", "valid.txt"},
    "stsb": {"train.tsv", "dev.tsv"},
    "aeslc": {"train.jsonl", "validation.jsonl"},
    "squad": {"train.json", "valid.json"},
}


def test_every_corpus_is_well_formed_pinned_and_licensed() -> None:
    table = load_table()
    assert set(table) == set(LAYOUT)
    for name, corpus in table.items():
        assert LAYOUT[name] <= {f.path for f in corpus.files}, name
        assert corpus.license and corpus.license_url.startswith("https://"), name
        assert corpus.use == f"--set data.dir=data/{name}"
        for d in corpus.downloads:
            assert d.url.startswith("https://"), d.url
            if "raw.githubusercontent.com" in d.url or "/archive/" in d.url:
                assert re.search(r"/[0-9a-f]{40}[/.]", d.url), f"{d.url}: not pinned to a commit"
            assert d.checked, d.name
        assert len({f.path for f in corpus.files}) == len(corpus.files)
    # The only files nothing pins: SQuAD's split of the official file (see corpora.json).
    unpinned = {name: c.unpinned for name, c in table.items() if c.unpinned}
    assert unpinned == {}
    assert {f.path for f in table["squad"].files if f.sha256 is None} == {"train.json",
                                                                          "valid.json"}  # fmt: skip
    assert table["squad"].downloads[0].sha256 is not None  # pinned as TensorFlow Datasets does


def test_pinned_files_are_the_shared_copies(shared_data: Path) -> None:
    """Every file the table pins equals the copy the project's recipes were measured on."""
    checked = 0
    for name, corpus in load_table().items():
        for f in corpus.files:
            shared = shared_data / name / f.path
            if f.sha256 is None or not shared.is_file():
                continue
            assert hashlib.sha256(shared.read_bytes()).hexdigest() == f.sha256, shared
            assert shared.stat().st_size == f.size
            checked += 1
    assert checked >= 20


def test_mirror_replaces_every_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MIRROR_ENV, "http://127.0.0.1:9/m/")
    corpus = load_table()["sst2"]
    assert corpus.url(corpus.downloads[0]) == "http://127.0.0.1:9/m/sst2/train.tsv"


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"files": [{"path": "../x", "from": "a", "steps": [], "checked": ""}]}, "relative path"),
        ({"files": [{"path": "x", "from": "nope", "steps": [], "checked": ""}]}, "no download"),
        ({"files": [{"path": "x", "from": "a", "steps": [{"op": "rot13"}], "checked": ""}]},
         "unknown step 'rot13'"),
        ({"downloads": [{"name": "a", "url": "u", "sha256": "xyz", "checked": ""}]}, "hex"),
    ],
)  # fmt: skip
def test_malformed_tables_are_one_line_errors(tmp_path: Path, entry: dict, message: str) -> None:
    corpus = {
        "title": "t", "task": "lm", "source": "s", "license": "l", "license_url": "u",
        "reference": "r", "use": "u",
        "downloads": [{"name": "a", "url": "u", "size": 1, "sha256": None, "checked": ""}],
        "files": [{"path": "x", "from": "a", "steps": [], "checked": ""}],
        **entry,
    }  # fmt: skip
    path = tmp_path / "table.json"
    path.write_text(json.dumps({"format": 1, "corpora": {"c": corpus}}))
    with pytest.raises(DataError, match=re.escape(message)):
        load_table(path)


def test_steps_convert_as_the_table_says(tmp_path: Path) -> None:
    assert STEPS["gunzip"](gzip.compress(b"a\nb\n"), {}) == b"a\nb\n"
    with pytest.raises(DataError, match="expands past 100"):
        STEPS["gunzip"](gzip.compress(b"0" * 10_000), {"max_bytes": 100})
    with pytest.raises(DataError, match="cut short"):
        STEPS["gunzip"](gzip.compress(b"0" * 10_000)[:-12], {})
    assert STEPS["lf"](b"a\r\nb\r\n", {}) == b"a\nb\n"
    header = {"old": "label\tcontent", "new": "label\tsentence"}
    assert STEPS["header"](b"label\tcontent\n0\tx\n", header) == b"label\tsentence\n0\tx\n"
    with pytest.raises(DataError, match="expected the first line"):
        STEPS["header"](b"text\tlabel\n", header)
    rows = b"g\tf\t2012\t1\t5.000\tA b.\tA c.\tlicense\ng\tf\t2012\t2\t1.0\tx\ty\n"
    got = STEPS["columns"](rows, {"keep": [4, 5, 6], "header": "score\tsentence1\tsentence2"})
    assert got == b"score\tsentence1\tsentence2\n5.000\tA b.\tA c.\n1.0\tx\ty\n"

    folder = tmp_path / "dev"
    folder.mkdir()
    (folder / "b_2.subject").write_text(
        "Body two\n\n@subject\nS2\n\n@ann0\nx\n\n@ann1\ny\n\n@ann2\nz"
    )
    (folder / "a_1.subject").write_text("Body\none\n\n@subject\nS1")
    lines = [json.loads(x) for x in STEPS["aeslc"](folder, {}).decode().splitlines()]
    assert lines == [
        {"text": "Body\none", "summary": "S1", "id": "a_1"},
        {"text": "Body two", "summary": "S2", "id": "b_2", "annotations": ["x", "y", "z"]},
    ]
    squad = json.dumps({"data": [{"title": str(i)} for i in range(5)], "version": "1.1"})
    head = json.loads(STEPS["squad_articles"](squad.encode(), {"part": "head", "tail": 2}))
    tail = json.loads(STEPS["squad_articles"](squad.encode(), {"part": "tail", "tail": 2}))
    assert [a["title"] for a in head["data"]] == ["0", "1", "2"]
    assert [a["title"] for a in tail["data"]] == ["3", "4"] and tail["version"] == "1.1"
