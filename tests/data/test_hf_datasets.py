"""``data.hf_dataset``: Hugging Face ``datasets`` (here: local Parquet and JSON files, no
network) exported into the JSON lines the file readers take; columns, ClassLabel names,
slicing, streaming, and one-line errors naming the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

datasets = pytest.importorskip("datasets")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from attnkit.data.hf_datasets import export_split  # noqa: E402
from attnkit.errors import ConfigError, DataError  # noqa: E402
from attnkit.training.runconfig import RunConfig  # noqa: E402


@pytest.fixture(autouse=True)
def _hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``datasets``' Arrow cache in the test's folder; nothing reaches the network."""
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)


def settings(**given: Any) -> Any:
    run = RunConfig.from_dict({"data": {"hf_dataset": given}})
    return run.data.hf_dataset


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture
def wmt(tmp_path: Path) -> Path:
    """A WMT-style Parquet file: a ``translation`` column of ``{de, en}`` dicts."""
    rows = [{"de": f"hallo welt {i}", "en": f"hello world {i}"} for i in range(20)]
    path = tmp_path / "wmt.parquet"
    pq.write_table(pa.table({"translation": rows, "id": list(range(20))}), path)
    return path


def test_translation_dicts_with_the_runs_languages_and_slicing(wmt: Path, tmp_path: Path) -> None:
    s = settings(path="parquet", data_files=str(wmt), split="train[:25%]")
    out = export_split(s, s.split, "pairs", root=tmp_path / "c", langs=("de", "en"))
    assert records(out.path) == [{"src": f"hallo welt {i}", "tgt": f"hello world {i}"}
                                 for i in range(5)]  # fmt: skip
    again = export_split(s, s.split, "pairs", root=tmp_path / "c", langs=("de", "en"))
    assert again.path == out.path  # cached: the same export, reused
    flipped = export_split(s, s.split, "pairs", root=tmp_path / "c", langs=("en", "de"))
    assert records(flipped.path)[0] == {"src": "hello world 0", "tgt": "hallo welt 0"}
    with pytest.raises(DataError, match=r"row 0: column 'translation' has no 'fr' text.*de, en"):
        export_split(s, s.split, "pairs", root=tmp_path / "c", langs=("fr", "en"))


def test_two_columns_and_a_missing_column_lists_the_columns(tmp_path: Path) -> None:
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps({"de": f"eins {i}", "en": f"one {i}"}) + "\n"
                            for i in range(6)))  # fmt: skip
    s = settings(path="json", data_files=str(path), columns={"src": "de", "tgt": "en"})
    out = export_split(s, "train", "pairs", root=tmp_path / "c")
    assert records(out.path)[5] == {"src": "eins 5", "tgt": "one 5"}
    s = settings(path="json", data_files=str(path), columns={"src": "de", "tgt": "english"})
    with pytest.raises(
        ConfigError, match=r"columns.tgt: .* no column 'english' \(columns: de, en\)"
    ):
        export_split(s, "train", "pairs", root=tmp_path / "c")
    s = settings(path="json", data_files=str(path))
    with pytest.raises(ConfigError, match=r"no column for src, tgt; .*its columns: de, en"):
        export_split(s, "train", "pairs", root=tmp_path / "c")
    s = settings(path="json", data_files=str(path), columns={"label": "de"})
    with pytest.raises(ConfigError, match=r"columns.label: not a column role here"):
        export_split(s, "train", "pairs", root=tmp_path / "c")


def test_classlabel_names_become_the_labels_in_their_order(tmp_path: Path) -> None:
    label = datasets.ClassLabel(names=["negative", "positive"])
    features = datasets.Features({"sentence": datasets.Value("string"), "label": label})
    ds = datasets.Dataset.from_dict(
        {"sentence": ["bad", "good", "fine"], "label": [0, 1, 1]}, features=features
    )
    ds.to_parquet(tmp_path / "sst.parquet")
    s = settings(path="parquet", data_files=str(tmp_path / "sst.parquet"))
    out = export_split(s, "train", "labelled", root=tmp_path / "c")
    # Parquet keeps the features in its schema metadata: the names come back
    assert out.label_names == ("negative", "positive")
    assert records(out.path) == [{"label": "negative", "text": "bad"},
                                 {"label": "positive", "text": "good"},
                                 {"label": "positive", "text": "fine"}]  # fmt: skip


def test_streaming_reads_rows_and_refuses_percent_slices(wmt: Path, tmp_path: Path) -> None:
    s = settings(path="parquet", data_files=str(wmt), streaming=True, split="train[2:5]")
    out = export_split(s, s.split, "pairs", root=tmp_path / "c", langs=("de", "en"))
    assert [r["src"] for r in records(out.path)] == [f"hallo welt {i}" for i in (2, 3, 4)]
    s = settings(path="parquet", data_files=str(wmt), streaming=True, split="train[:10%]")
    with pytest.raises(ConfigError, match=r"data.hf_dataset.split: 'train\[:10%\]' with streaming"):
        export_split(s, s.split, "pairs", root=tmp_path / "c")


def test_bad_input_is_one_line_naming_the_field(tmp_path: Path, wmt: Path) -> None:
    s = settings(path="parquet", data_files=str(wmt))
    with pytest.raises(
        DataError, match=r"data.hf_dataset.split: cannot load parquet split 'valid'"
    ):
        export_split(s, "valid", "pairs", root=tmp_path / "c")
    text = tmp_path / "t.jsonl"
    text.write_text(json.dumps({"text": None}) + "\n")
    s = settings(path="json", data_files=str(text))
    with pytest.raises(DataError, match=r"row 0: column 'text' \(text\) must hold text, got null"):
        export_split(s, "train", "text", root=tmp_path / "c")
    with pytest.raises(ConfigError, match=r"data.hf_dataset.path: name a dataset"):
        settings(split="train")
    with pytest.raises(ConfigError, match=r"data.hf_dataset.colums: unknown key; did you mean"):
        settings(path="json", colums={"text": "x"})
    with pytest.raises(ConfigError, match=r"data.hf_dataset.columns.text: expected a column name"):
        settings(path="json", columns={"text": 3})
    with pytest.raises(ConfigError, match=r"data.hf_dataset: applies to task"):
        RunConfig.from_dict({"task": "instruction", "data": {"hf_dataset": {"path": "json"}}})


def test_a_record_past_the_bound_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("attnkit.data.hf_datasets.MAX_RECORD_BYTES", 100)
    text = tmp_path / "t.jsonl"
    text.write_text(json.dumps({"text": "short"}) + "\n" + json.dumps({"text": "x" * 200}) + "\n")
    s = settings(path="json", data_files=str(text))
    with pytest.raises(DataError, match=r"split 'train' row 1: 2\d\d bytes, more than the 100"):
        export_split(s, "train", "text", root=tmp_path / "c")
    assert not list((tmp_path / "c").glob("hf_dataset-*/records.jsonl"))  # nothing half-written
