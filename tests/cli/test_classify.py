"""A text classifier through the CLI: train, classify (stdin, --json, pairs), evaluate
--labelled, attention and explore; and what is refused."""

from __future__ import annotations

import io
import json
import random
from pathlib import Path

import pytest

from attnkit.cli.main import main

CONFIG = """
task: text_classification
data: {{dir: {dir}, train: train.tsv, valid: valid.tsv, max_len: 32}}
tokenizer: {{kind: char}}
model: {{d_model: 32, num_heads: 2, d_ff: 64, num_layers: 2, max_len: 32, dropout: 0.0}}
train: {{max_steps: 80, batch_size: 16, schedule: constant, lr: 3.0e-3, warmup_steps: 0,
        log_every: 20, eval_every: 40, save_every: 0}}
"""
WORDS = ["cat", "dog", "sun", "tree", "road", "blue", "cold", "tall"]


def _rows(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        words = rng.sample(WORDS, 2)
        label = rng.choice(["pos", "neg"])
        words.insert(rng.randrange(3), "good" if label == "pos" else "bad")
        rows.append(f"{label}\t{' '.join(words)}")
    return rows


@pytest.fixture(scope="module")
def classifier(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("cls")
    (root / "train.tsv").write_text("label\ttext\n" + "\n".join(_rows(400, 0)) + "\n")
    (root / "valid.tsv").write_text("\n".join(_rows(60, 1)) + "\n")
    (root / "c.yaml").write_text(CONFIG.format(dir=root))
    out = root / "run"
    code = main(["train", "--config", str(root / "c.yaml"), "--out", str(out), "--no-progress"])
    assert code == 0
    return out


def _classify(monkeypatch, capsys, checkpoint, text, *extra) -> tuple[int, str, str]:
    monkeypatch.setattr("sys.stdin", io.StringIO(text))
    code = main(["classify", "--checkpoint", str(checkpoint), *extra])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_classify_prints_label_and_probability_per_line(classifier, monkeypatch, capsys):
    code, out, _ = _classify(monkeypatch, capsys, classifier, "good cat dog\nsun bad tree\n")
    assert code == 0
    lines = [line.split("\t") for line in out.splitlines()]
    assert [label for label, _ in lines] == ["pos", "neg"]
    assert all(0.5 < float(p) <= 1.0 for _, p in lines)
    code, out, _ = _classify(monkeypatch, capsys, classifier, "good cat dog\n", "--json")
    record = json.loads(out)
    assert record["label"] == "pos" and set(record["probabilities"]) == {"neg", "pos"}
    assert sum(record["probabilities"].values()) == pytest.approx(1.0, abs=1e-5)


def test_classify_errors_name_the_line(classifier, monkeypatch, capsys):
    code, _, err = _classify(monkeypatch, capsys, classifier, "good cat\n\n")
    assert code == 1 and "<stdin>:2: empty text" in err
    code, _, err = _classify(monkeypatch, capsys, classifier, "a\tb\tc\n")
    assert code == 1 and "<stdin>:1: expected text or text_a<TAB>text_b" in err
    assert len(err.strip().splitlines()) == 1


def test_evaluate_labelled_scores_the_validation_file(classifier, capsys):
    valid = classifier.parent / "valid.tsv"
    argv = ["evaluate", "--checkpoint", str(classifier), "--labelled", str(valid)]
    assert main([*argv, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["examples"] == 60 and result["accuracy"] >= 0.9
    metrics = json.loads((classifier / "metrics.jsonl").read_text().splitlines()[-1])
    assert metrics["split"] == "valid"
    assert result["accuracy"] == pytest.approx(metrics["accuracy"], abs=1e-6)
    assert result["macro_f1"] == pytest.approx(metrics["macro_f1"], abs=1e-6)
    assert set(result["per_label_accuracy"]) == {"neg", "pos"}
    assert main(argv) == 0
    assert capsys.readouterr().out.startswith(f"accuracy {result['accuracy']:.4f}   macro-F1")


def test_attention_and_explore_show_the_predicted_label(classifier, tmp_path, capsys):
    png = tmp_path / "a.png"
    assert main(["attention", "--checkpoint", str(classifier), "--text", "good sun",
                 "--out", str(png)]) == 0  # fmt: skip
    assert png.stat().st_size > 1000
    page = tmp_path / "e.html"
    assert main(["explore", "--checkpoint", str(classifier), "--text", "bad sun",
                 "--out", str(page)]) == 0  # fmt: skip
    assert "(classifier: neg (" in capsys.readouterr().out
    assert "attnkit.explorer" in page.read_text()


def test_a_model_without_a_head_is_refused(classifier, tmp_path, monkeypatch, capsys):
    from attnkit.checkpoints import save_checkpoint
    from attnkit.data.tokenizers import CharTokenizer
    from attnkit.models import EncoderOnlyConfig, EncoderOnlyModel

    tok = CharTokenizer.train(["abc"])
    config = EncoderOnlyConfig(d_model=8, num_heads=2, d_ff=16, num_layers=1, num_labels=0,
                               vocab_size=tok.vocab_size + 1, mask_id=tok.vocab_size)  # fmt: skip
    mlm = save_checkpoint(tmp_path / "mlm", model_state=EncoderOnlyModel(config).state_dict(),
                          config=config.to_dict(), tokenizer_json=tok.to_json())  # fmt: skip
    code, _, err = _classify(monkeypatch, capsys, mlm, "abc\n")
    assert code == 2 and "no classification head (num_labels=0)" in err
    valid = classifier.parent / "valid.tsv"
    # a headless encoder is scored as sentence embeddings, on scored pairs: a labelled
    # classification file is not one, and the error names the file and line
    assert main(["evaluate", "--checkpoint", str(mlm), "--labelled", str(valid)]) == 1
    err = capsys.readouterr().err
    assert "valid.tsv:" in err and len(err.strip().splitlines()) == 1, err
