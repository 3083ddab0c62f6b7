"""task: text_to_text: prefixed corpora (pairs and labelled texts) mixed by weight, one model."""

from __future__ import annotations

import json
import random

import pytest

from attnkit import checkpoints as ckpt
from attnkit.data.synthetic import number_splits
from attnkit.errors import ConfigError
from attnkit.training.loop import Trainer
from attnkit.training.runconfig import RunConfig
from attnkit.training.tasks import TextToTextTask, task_from_run

WORDS = {"1": ["good", "great", "fine", "nice"], "0": ["bad", "awful", "poor", "dull"]}


def _write(root):
    (root / "numbers").mkdir(parents=True)
    for split, pairs in number_splits(200, 10, 0, low=1, high=400, seed=0).items():
        if pairs:
            for side, lang in ((0, "en"), (1, "de")):
                text = "".join(p[side] + "\n" for p in pairs)
                (root / "numbers" / f"{split}.{lang}").write_text(text, encoding="utf-8")
    (root / "sentiment").mkdir()
    rng = random.Random(0)
    for split, n in (("train", 120), ("dev", 10)):
        lines = ["label\tsentence"]
        for _ in range(n):
            label = rng.choice("01")
            lines.append(f"{label}\tthe film was {rng.choice(WORDS[label])}")
        (root / "sentiment" / f"{split}.tsv").write_text("\n".join(lines) + "\n")


def _run(root, **train) -> RunConfig:
    return RunConfig.from_dict({
        "task": "text_to_text",
        "data": {"dir": str(root), "src_lang": "en", "tgt_lang": "de", "max_len": 64,
                 "corpora": [
                     {"name": "numbers", "dir": str(root / "numbers"), "weight": 2.0,
                      "prefix": "translate English to German: "},
                     {"name": "sst", "dir": str(root / "sentiment"), "kind": "labelled",
                      "train": "train.tsv", "valid": "dev.tsv", "prefix": "sst2 sentence: "},
                 ]},
        "tokenizer": {"kind": "char"},
        "model": {"preset": "t5_small_cpu", "d_model": 32, "num_heads": 2, "d_ff": 48,
                  "num_encoder_layers": 1, "num_decoder_layers": 1, "dropout": 0.0,
                  "max_len": 64, "relative_buckets": 8, "relative_max_distance": 16},
        "train": {"max_steps": 4, "max_tokens": 600, "warmup_steps": 2, "lr": 3e-3,
                  "schedule": "constant", "log_every": 1, "eval_every": 100, "save_every": 0,
                  "valid_bleu_sentences": 4, **train},
    })  # fmt: skip


def test_corpora_are_prefixed_weighted_and_scored_apart(tmp_path):
    _write(tmp_path)
    task = task_from_run(_run(tmp_path))
    assert isinstance(task, TextToTextTask)
    assert task.train_sizes == {"numbers": 200, "sst": 120}
    assert list(task.data.shares) == pytest.approx([2 / 3, 1 / 3])
    sst = task.valid_sets["sst"]
    assert sst[0][0].startswith("sst2 sentence: the film was ") and sst[0][1] in "01"
    assert task.valid_sets["numbers"][0][0].startswith("translate English to German: ")
    model = task.build_model()
    metrics = task.evaluate(model)
    assert {"loss", "ppl", "numbers_bleu", "numbers_exact_match", "sst_bleu",
            "sst_exact_match"} <= set(metrics)  # fmt: skip


def test_one_t5_trains_on_both_and_its_run_reloads(tmp_path):
    _write(tmp_path)
    run = _run(tmp_path, max_steps=30, eval_every=30, save_every=30, lr=1e-2)
    trainer = Trainer(run, task_from_run(run), tmp_path / "run", progress=False)
    summary = trainer.fit()
    records = [json.loads(x) for x in (trainer.out_dir / "metrics.jsonl").read_text().split("\n")
               if x]  # fmt: skip
    train = [r["loss"] for r in records if r["split"] == "train"]
    assert sum(train[-5:]) < 0.8 * sum(train[:5])
    assert "sst_exact_match" in summary["valid"]
    loaded = ckpt.load_model(trainer.out_dir, "cpu")
    assert loaded.family.name == "transformer"
    again = RunConfig.from_dict(json.loads(run.to_json()))  # what run.json holds
    assert again.data.corpora[1].prefix == "sst2 sentence: "


def test_corpus_keys_of_text_to_text_are_refused_elsewhere(tmp_path):
    with pytest.raises(ConfigError, match=r"data.corpora\[0\].prefix: applies to task text_to_t"):
        RunConfig.from_dict({"task": "translation",
                             "data": {"corpora": [{"dir": "x", "prefix": "p: "}]}})  # fmt: skip
    plain = RunConfig.from_dict({"task": "translation", "data": {"corpora": [{"dir": "x"}]}})
    assert "prefix" not in plain.to_dict()["data"]["corpora"][0]  # run.json reloads
    RunConfig.from_dict(plain.to_dict())
    _write(tmp_path)
    run = _run(tmp_path)
    bad = RunConfig.from_dict({**run.to_dict(), "data": {**run.to_dict()["data"], "corpora": [
        {"name": "a", "dir": str(tmp_path / "numbers")},
        {"name": "a", "dir": str(tmp_path / "numbers")}]}})  # fmt: skip
    with pytest.raises(ConfigError, match="names must differ"):
        task_from_run(bad)
