"""A named-entity tagger through the CLI and the server: train (CoNLL IOB1, JSONL
validation), tag (word/TAG, --json spans), evaluate --labelled, resume, LoRA, POST /v1/tag;
and the one-line errors."""

from __future__ import annotations

import io
import json
import random
from pathlib import Path

import pytest

from attnkit.cli.main import main

pytestmark = pytest.mark.slow  # trains a tiny tagger first (~10 s on 2 cores)

CONFIG = """
task: token_classification
data: {{dir: {dir}, train: train.txt, valid: valid.jsonl, max_len: 24}}
tokenizer: {{kind: bpe, vocab_size: 120}}
model: {{d_model: 32, num_heads: 2, d_ff: 64, num_layers: 1, max_len: 24, dropout: 0.0}}
train: {{max_steps: 60, batch_size: 16, schedule: constant, lr: 1.0e-2, warmup_steps: 0,
        log_every: 20, eval_every: 60, save_every: 30, cpu_matmul: mkl, seed: 3,
        threads: 1}}
"""
PEOPLE, PLACES = ["john", "mary", "ali"], ["paris", "oslo", "rome"]
OTHER = ["went", "to", "the", "met", "saw", "and", "in"]


def _sentence(rng: random.Random) -> tuple[list[str], list[str]]:
    words, tags = [], []
    for _ in range(rng.randint(2, 7)):
        r = rng.random()
        if r < 0.2:  # IOB1: B- only where an entity follows one of its type
            words += [rng.choice(PEOPLE), "smith"]
            tags += ["B-PER" if tags[-1:] == ["I-PER"] else "I-PER", "I-PER"]
        elif r < 0.35:
            words.append(rng.choice(PLACES))
            tags.append("B-LOC" if tags[-1:] == ["I-LOC"] else "I-LOC")
        else:
            words.append(rng.choice(OTHER))
            tags.append("O")
    return words, tags


def _data(root: Path) -> None:
    rng = random.Random(0)
    lines = ["-DOCSTART- -X- O O", ""]
    for _ in range(300):
        words, tags = _sentence(rng)
        lines += [f"{w} X X {t}" for w, t in zip(words, tags)] + [""]
    (root / "train.txt").write_text("\n".join(lines) + "\n")
    from attnkit.data.tag_schemes import to_bio

    valid = []
    for _ in range(40):
        words, tags = _sentence(rng)
        valid.append(json.dumps({"tokens": words, "tags": to_bio(tags, "iob1")}))
    (root / "valid.jsonl").write_text("\n".join(valid) + "\n")


@pytest.fixture(scope="module")
def tagger(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("ner")
    _data(root)
    (root / "c.yaml").write_text(CONFIG.format(dir=root))
    out = root / "run"
    code = main(["train", "--config", str(root / "c.yaml"), "--out", str(out), "--no-progress"])
    assert code == 0
    return out


def _tag(monkeypatch, capsys, checkpoint, text, *extra) -> tuple[int, str, str]:
    monkeypatch.setattr("sys.stdin", io.StringIO(text))
    code = main(["tag", "--checkpoint", str(checkpoint), *extra])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_tag_prints_each_word_with_its_tag(tagger, monkeypatch, capsys):
    text = "john smith went to paris\nmary smith met ali smith in rome\n"
    code, out, _ = _tag(monkeypatch, capsys, tagger, text)
    assert code == 0
    assert out.splitlines() == [
        "john/B-PER smith/I-PER went/O to/O paris/B-LOC",
        "mary/B-PER smith/I-PER met/O ali/B-PER smith/I-PER in/O rome/B-LOC",
    ]
    code, out, _ = _tag(monkeypatch, capsys, tagger, text, "--scheme", "bioes")
    assert out.splitlines()[0] == "john/B-PER smith/E-PER went/O to/O paris/S-LOC"
    code, out, _ = _tag(monkeypatch, capsys, tagger, "john smith went to paris\n", "--json")
    record = json.loads(out)
    assert record["words"] == ["john", "smith", "went", "to", "paris"]
    assert record["entities"] == [
        {"type": "PER", "start": 0, "end": 2, "text": "john smith"},
        {"type": "LOC", "start": 4, "end": 5, "text": "paris"},
    ]


def test_a_long_sentence_is_cut_with_a_warning(tagger, monkeypatch, capsys):
    code, out, err = _tag(monkeypatch, capsys, tagger, " ".join(["paris"] * 40) + "\n")
    assert code == 0 and "1 sentence(s) cut to 24 tokens" in err
    tags = [pair.rsplit("/", 1)[1] for pair in out.split()]
    assert len(tags) == 40 and tags[-1] == "O"


def test_evaluate_labelled_gives_the_validation_scores(tagger, capsys):
    valid = tagger.parent / "valid.jsonl"
    argv = ["evaluate", "--checkpoint", str(tagger), "--labelled", str(valid)]
    assert main([*argv, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["f1"] >= 0.9 and result["sentences"] == 40
    metrics = json.loads((tagger / "metrics.jsonl").read_text().splitlines()[-1])
    assert metrics["split"] == "valid"
    for key in ("f1", "precision", "recall"):
        assert result[key] == pytest.approx(metrics[key], abs=1e-9)
    assert set(result["per_type"]) == {"LOC", "PER"}
    assert result["per_type"]["PER"]["f1"] == pytest.approx(metrics["f1_PER"])
    assert main(argv) == 0
    assert capsys.readouterr().out.startswith(f"entity F1 {result['f1']:.4f}")


def test_bad_input_is_one_line(tagger, tmp_path, monkeypatch, capsys):
    code, _, err = _tag(monkeypatch, capsys, tagger, "john went\n\n")
    assert code == 1 and err.strip() == (
        "attnkit tag: error: <stdin>:2: empty line; expected a sentence (words separated by spaces)"
    )
    bad = tmp_path / "bad.txt"
    bad.write_text("john I-PER\nwent O\n\nrome I-ORG\n")  # ORG: a type the model lacks
    code = main(["evaluate", "--checkpoint", str(tagger), "--labelled", str(bad)])
    err = capsys.readouterr().err
    assert code == 1 and f"{bad}:4: tag 'B-ORG' is not one of the model's labels" in err
    assert len(err.strip().splitlines()) == 1
    code = main(["classify", "--checkpoint", str(tagger), "--input", str(bad)])
    assert code == 2 and "labels tokens, not texts" in capsys.readouterr().err
    (tmp_path / "c.yaml").write_text(
        CONFIG.format(dir=tmp_path).replace("train.txt", "bad.txt").replace("valid.jsonl", "v.txt")
    )
    (tmp_path / "v.txt").write_text("a O\nb\n")
    code = main(["train", "--config", str(tmp_path / "c.yaml"), "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 1 and "v.txt:2: expected a word and its tag" in err


def test_resume_is_bit_identical_and_lora_trains_the_head(tagger, tmp_path, capsys):
    root = tagger.parent
    resumed = tmp_path / "resumed"
    argv = ["train", "--config", str(root / "c.yaml"), "--out", str(resumed), "--no-progress"]
    assert main([*argv, "--set", "train.max_steps=30"]) == 0
    assert main([*argv, "--resume"]) == 0

    def losses(run: Path) -> dict[int, float]:
        records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        return {r["step"]: r["loss"] for r in records if r["split"] == "train"}

    straight, again = losses(tagger), losses(resumed)
    assert {20, 40, 60} <= set(straight) & set(again)
    assert all(again[step] == straight[step] for step in (20, 40, 60))
    lora = tmp_path / "lora"
    settings = ["train.max_steps=4", "train.save_every=0", "train.eval_every=4",
                'train.lora={"rank": 2, "alpha": 4, "targets": ["q", "v"]}']  # fmt: skip
    sets = [x for s in settings for x in ("--set", s)]
    assert main([*argv[:3], "--init", str(tagger), "--out", str(lora), "--no-progress", *sets]) == 0
    assert "trained in full: token_classifier.classifier" in capsys.readouterr().out


def test_serve_tags_in_batches_and_refuses_bad_requests(tagger, monkeypatch, capsys):
    from fastapi.testclient import TestClient

    from attnkit.checkpoints.loading import load_model
    from attnkit.serve.app import ServeSettings, create_app
    from attnkit.serve.model_host import ModelHost

    app = create_app(ModelHost(load_model(tagger)), ServeSettings(threads=1, max_wait_ms=0))
    texts = ["john smith went to paris", "ali smith met mary smith"]
    _, out, _ = _tag(monkeypatch, capsys, tagger, "\n".join(texts) + "\n", "--json")
    expected = [json.loads(line) for line in out.splitlines()]
    with TestClient(app) as client:
        response = client.post("/v1/tag", json={"text": texts})
        assert response.status_code == 200
        results = response.json()["results"]
        assert results == expected
        iob1 = client.post("/v1/tag", json={"text": texts[:1], "scheme": "iob1"}).json()
        assert iob1["results"][0]["tags"] == ["I-PER", "I-PER", "O", "O", "I-LOC"]
        for body, status, message in [
            ({"text": ["   "]}, 422, "text[0]: holds only whitespace"),
            ({"text": [" ".join(["rome"] * 40)]}, 422, "text[0]: longer than the 24 tokens"),
            ({"text": ["a"], "scheme": "xml"}, 422, "scheme"),
            ({"sentences": ["a"]}, 422, "text"),
        ]:
            r = client.post("/v1/tag", json=body)
            assert r.status_code == status and message in json.dumps(r.json()), r.json()
        r = client.post("/v1/classify", json={"text": ["a"]})
        assert r.status_code == 400 and "classification head" in json.dumps(r.json())


def test_attention_and_explore_read_a_tagger(tagger, tmp_path, capsys):
    png = tmp_path / "a.png"
    argv = ["--checkpoint", str(tagger), "--text", "john smith went to paris"]
    assert main(["attention", *argv, "--out", str(png)]) == 0
    assert png.stat().st_size > 1000
    page = tmp_path / "e.html"
    assert main(["explore", *argv, "--out", str(page)]) == 0
    assert "attnkit.explorer" in page.read_text()


def test_tag_requests_in_one_pass_get_what_they_get_alone(tagger):
    from attnkit.checkpoints.loading import load_model
    from attnkit.serve.model_host import ModelHost
    from attnkit.serve.tag_batch import encode_sentences, tag

    engine = ModelHost(load_model(tagger))
    jobs = [encode_sentences(engine, ["john smith went to paris", "rome"]),
            encode_sentences(engine, ["mary smith met ali smith in oslo and rome"])]  # fmt: skip
    together = tag(engine, jobs)
    alone = [tag(engine, [job])[0] for job in jobs]
    assert together == alone
    assert together[0][0] == ["B-PER", "I-PER", "O", "O", "B-LOC"]
