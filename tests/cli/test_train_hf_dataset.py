"""``attnkit train`` / ``prepare`` on ``data.hf_dataset`` (local Parquet/JSON read through
``datasets``, no network): translation, lm and text_classification train a few steps."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

datasets = pytest.importorskip("datasets")

from attnkit.cli.main import main  # noqa: E402

TRANSLATION = """
task: translation
data: {{src_lang: de, tgt_lang: en, max_len: 64, loading: {loading},
        hf_dataset: {{path: parquet, data_files: {{train: {file}, valid: {file}}},
                      split: "train[:80%]", valid_split: "valid[80%:]"}}}}
tokenizer: {{kind: char}}
model: {{preset: small, d_model: 16, num_heads: 2, d_ff: 32, num_encoder_layers: 1,
        num_decoder_layers: 1, max_len: 96}}
train: {{max_steps: 3, max_tokens: 400, warmup_steps: 1, log_every: 1, eval_every: 3,
        save_every: 0, valid_bleu_sentences: 0}}
"""
LM = """
task: lm
data: {{valid_fraction: 0.2}}
tokenizer: {{kind: char}}
model: {{preset: small, d_model: 16, num_heads: 2, d_ff: 32, num_layers: 1, max_len: 16}}
train: {{max_steps: 3, max_tokens: 128, warmup_steps: 1, log_every: 1, eval_every: 3,
        save_every: 0}}
"""
CLASSIFY = """
task: text_classification
data: {{max_len: 32, hf_dataset: {{path: parquet, data_files: {file}, split: "train[:24]",
        valid_split: "train[24:]", columns: {{text: review}}}}}}
tokenizer: {{kind: char}}
model: {{d_model: 16, num_heads: 2, d_ff: 32, num_layers: 1, max_len: 32}}
train: {{max_steps: 3, batch_size: 8, schedule: constant, warmup_steps: 0, log_every: 1,
        eval_every: 3, save_every: 3}}
"""


@pytest.fixture(autouse=True)
def _hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.chdir(tmp_path)


def run(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(list(args))
    return code, out.getvalue()


def _wmt(tmp_path: Path) -> Path:
    rows = [{"de": f"zahl {i}", "en": f"number {i}"} for i in range(40)]
    path = tmp_path / "wmt.parquet"
    datasets.Dataset.from_dict({"translation": rows}).to_parquet(path)
    return path


@pytest.mark.parametrize("loading", ["prepared", "streaming"])
def test_translation_from_a_parquet_dataset(tmp_path: Path, loading: str) -> None:
    config = tmp_path / "t.yaml"
    config.write_text(TRANSLATION.format(file=_wmt(tmp_path), loading=loading))
    code, out = run("train", "--config", str(config), "--out", "run", "--no-progress")
    assert code == 0, out
    assert "exported 32 records of parquet split 'train[:80%]'" in out
    assert "exported 8 records of parquet split 'valid[80%:]'" in out
    assert json.loads(out.splitlines()[-1])["step"] == 3
    written = json.loads((tmp_path / "run" / "run.json").read_text())
    assert written["data"]["hf_dataset"]["path"] == "parquet"  # the config as the user gave it
    assert written["data"]["train"] == "train"
    if loading == "prepared":
        code, out = run("prepare", "--config", str(config))
        assert code == 0 and json.loads(out.splitlines()[-1])["pairs"] == 32
        assert "exported" not in out  # the export is reused from the cache


def test_lm_from_json_lines_set_on_the_command_line(tmp_path: Path) -> None:
    (tmp_path / "text.jsonl").write_text(
        "".join(json.dumps({"body": f"the cat sat on mat number {i}."}) + "\n" for i in range(60))
    )
    (tmp_path / "lm.yaml").write_text(LM.format())
    code, out = run(
        "train", "--config", "lm.yaml", "--out", "run", "--no-progress",
        "--set", "data.hf_dataset.path=json", "--set", "data.hf_dataset.data_files=text.jsonl",
        "--set", "data.hf_dataset.columns.text=body",
    )  # fmt: skip
    assert code == 0, out
    assert "exported 60 records of json split 'train'" in out
    assert json.loads(out.splitlines()[-1])["step"] == 3


def test_classification_takes_classlabel_names(tmp_path: Path) -> None:
    features = datasets.Features({"review": datasets.Value("string"),
                                  "label": datasets.ClassLabel(names=["pos", "neg"])})  # fmt: skip
    texts = [("good fun", 0), ("bad film", 1), ("great", 0), ("awful", 1)] * 8
    ds = datasets.Dataset.from_dict(
        {"review": [t for t, _ in texts], "label": [x for _, x in texts]}, features=features
    )
    ds.to_parquet(tmp_path / "reviews.parquet")
    (tmp_path / "c.yaml").write_text(CLASSIFY.format(file=tmp_path / "reviews.parquet"))
    code, out = run("train", "--config", "c.yaml", "--out", "run", "--no-progress")
    assert code == 0, out
    assert _label_names(tmp_path / "run") == ["pos", "neg"]  # the ClassLabel's order, not sorted


def _label_names(run_dir: Path) -> list[str]:
    for path in sorted(run_dir.rglob("config.json")):
        data = json.loads(path.read_text())
        if "label_names" in data:
            return list(data["label_names"])
    raise AssertionError(f"no config.json with label_names under {run_dir}")


def test_a_missing_column_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "lm.yaml").write_text(LM.format())
    (tmp_path / "t.jsonl").write_text(json.dumps({"body": "x"}) + "\n")
    code = main(["train", "--config", "lm.yaml", "--out", "run", "--no-progress",
                 "--set", "data.hf_dataset.path=json",
                 "--set", "data.hf_dataset.data_files=t.jsonl"])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()[-1]  # above: datasets' progress bars
    assert code == 2 and err.startswith("attnkit train: error: ")
    assert "data.hf_dataset.columns: json split 'train' has no column for text" in err
    assert "its columns: body" in err


def test_files_named_beside_the_dataset_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "t.yaml"
    config.write_text(TRANSLATION.format(file=_wmt(tmp_path), loading="prepared"))
    code = main(["train", "--config", str(config), "--out", "run", "--no-progress",
                 "--set", "data.train=europarl"])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2 and "data.train: data.hf_dataset names the data; remove data.train" in err
