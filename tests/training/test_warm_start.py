"""``attnkit train --init CKPT``: a run starts from a checkpoint (attnkit.training.warm_start)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from attnkit import checkpoints as ckpt
from attnkit.checkpoints.digest import weights_digest
from attnkit.cli.main import main
from attnkit.errors import CheckpointError, ConfigError
from attnkit.models import EncoderOnlyConfig, ViTConfig, config_from_preset
from attnkit.training.start_config import config_from_start
from attnkit.training.warm_start import count_parameters, load_warm_start

CONFIG = """
task: {task}
data: {{dir: {dir}, text: tiny.txt, valid_fraction: 0.2}}
tokenizer: {{kind: char}}
model: {{preset: small, d_model: 32, num_heads: 2, d_ff: 64, num_layers: 2, max_len: 16,
        dropout: 0.0}}
train: {{max_steps: 2, max_tokens: 64, schedule: constant, lr: 0.01, warmup_steps: 0,
        log_every: 1, eval_every: 100, eval_blocks: 2, save_every: 0}}
"""
# The second run's config: no model section (the architecture comes from --init).
FOLLOW_UP = """
task: {task}
data: {{dir: {dir}, text: more.txt, valid_fraction: 0.2}}
train: {{max_steps: 2, max_tokens: 64, schedule: constant, lr: 0.01, warmup_steps: 0,
        log_every: 1, eval_every: 100, eval_blocks: 2, save_every: 0}}
"""
TEXT = "the cat sat on the mat. the dog sat on the log. " * 20
MORE = "a dog and a cat met on a mat by the log. " * 20


def _sha(path: Path) -> str:
    return weights_digest(path).content


@pytest.fixture(scope="module", params=["lm", "mlm"])
def base_run(request, tmp_path_factory) -> tuple[str, Path]:
    """A tiny trained run of each text family (decoder-only, encoder-only)."""
    task = request.param
    root = tmp_path_factory.mktemp(f"base_{task}")
    (root / "tiny.txt").write_text(TEXT, encoding="utf-8")
    (root / "more.txt").write_text(MORE, encoding="utf-8")
    config = root / "base.yaml"
    config.write_text(CONFIG.format(task=task, dir=root), encoding="utf-8")
    (root / "follow.yaml").write_text(FOLLOW_UP.format(task=task, dir=root), encoding="utf-8")
    out = root / "base"
    assert main(["train", "--config", str(config), "--out", str(out), "--no-progress"]) == 0
    return task, out


def _train(config: Path, out: Path, *extra: str) -> int:
    return main(["train", "--config", str(config), "--out", str(out), "--no-progress", *extra])


def test_init_starts_from_the_checkpoint_and_records_it(base_run, tmp_path, capsys):
    task, base = base_run
    latest = ckpt.latest_checkpoint(base)
    # One update at a tiny learning rate: the weights barely move from the checkpoint's.
    out = tmp_path / "next"
    code = _train(base.parent / "follow.yaml", out, "--init", str(base),
                  "--set", "train.max_steps=1", "--set", "train.lr=1.0e-9")  # fmt: skip
    assert code == 0
    printed = capsys.readouterr().out
    assert f"starting from {latest.resolve()}" in printed
    record = json.loads((out / "run.json").read_text())["init"]
    assert record["sha256"] == _sha(latest / "model.safetensors")
    assert record["path"] == str(base) and record["step"] == 2
    assert Path(record["checkpoint"]) == latest.resolve()
    # A fresh run: step 1 is its first checkpoint (the optimizer and schedule start anew).
    mine = ckpt.latest_checkpoint(out)
    assert mine.name == "step_00000001"
    state = ckpt.load_checkpoint(mine)
    assert state.trainer_state["run"]["init"] == record
    assert state.trainer_state["scheduler"]["last_epoch"] == 1
    # Same architecture, same tokenizer, (almost) the same weights.
    assert json.loads((mine / "config.json").read_text()) == json.loads(
        (latest / "config.json").read_text()
    )
    assert (mine / "tokenizer.json").read_text() == (latest / "tokenizer.json").read_text()
    before = ckpt.load_checkpoint(latest).model_state
    for name, value in state.model_state.items():
        torch.testing.assert_close(value, before[name], atol=1e-6, rtol=0)


def test_init_weights_are_the_checkpoints_at_step_zero(base_run, tmp_path):
    from attnkit.training.loop import Trainer
    from attnkit.training.runconfig import load_run_config
    from attnkit.training.tasks import task_from_run

    _, base = base_run
    run = load_run_config(base.parent / "follow.yaml")
    initial = load_warm_start(base)
    trainer = Trainer(run, task_from_run(run, None, initial), tmp_path / "t", progress=False)
    assert trainer.step == 0
    expected = ckpt.load_checkpoint(ckpt.latest_checkpoint(base)).model_state
    got = trainer.model.state_dict()
    assert set(got) == set(expected)
    for name, value in expected.items():
        assert torch.equal(got[name], value), name
    assert not trainer.optimizer.state  # no Adam moments carried over


@pytest.mark.parametrize("key", ["d_model=64", "num_layers=3", "positions=sinusoidal",
                                 "activation=relu", "family=transformer"])  # fmt: skip
def test_an_architecture_key_is_a_one_line_error_naming_it(base_run, tmp_path, capsys, key):
    _, base = base_run
    out = tmp_path / "bad"
    assert _train(base.parent / "follow.yaml", out, "--init", str(base), "--set",
                  f"model.{key}") == 2  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert f"model.{key.split('=')[0]}" in err, err
    assert not out.exists()


def test_dropout_may_change_and_the_old_model_section_may_be_repeated(base_run, tmp_path):
    _, base = base_run
    out = tmp_path / "dropout"
    # The base run's own config repeats every model key the checkpoint has.
    assert _train(base.parent / "base.yaml", out, "--init", str(base),
                  "--set", "model.dropout=0.25") == 0  # fmt: skip
    config = json.loads((ckpt.latest_checkpoint(out) / "config.json").read_text())
    assert config["dropout"] == 0.25


def test_resume_continues_an_init_run_and_keeps_its_record(base_run, tmp_path, capsys):
    task, base = base_run
    out = tmp_path / "resumed"
    follow = base.parent / "follow.yaml"
    assert _train(follow, out, "--init", str(base)) == 0
    record = json.loads((out / "run.json").read_text())["init"]
    # The resumed run needs neither --init nor the original checkpoint's model section.
    assert _train(follow, out, "--resume", "--set", "train.max_steps=4") == 0
    assert "resuming" in capsys.readouterr().out
    assert ckpt.latest_checkpoint(out).name == "step_00000004"
    assert json.loads((out / "run.json").read_text())["init"] == record
    # --init naming other weights than the run started from is refused.
    other = tmp_path / "other"
    assert _train(follow, other, "--init", str(base), "--set", "train.lr=0.5") == 0
    assert _train(follow, out, "--resume", "--init", str(other)) == 2
    assert "started from other weights" in capsys.readouterr().err


def test_a_recorded_sha256_refuses_changed_weights(base_run, tmp_path):
    _, base = base_run
    with pytest.raises(CheckpointError, match="sha256"):
        load_warm_start(base, expected_sha256="0" * 64)


def test_init_from_a_directory_without_a_checkpoint_fails_cleanly(base_run, tmp_path, capsys):
    _, base = base_run
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _train(base.parent / "follow.yaml", tmp_path / "x", "--init", str(empty)) == 1
    err = capsys.readouterr().err
    assert "holds no checkpoint" in err and len(err.strip().splitlines()) == 1


def test_config_from_initial_rules():
    base = EncoderOnlyConfig(d_model=32, num_heads=2, d_ff=64, num_layers=2, vocab_size=50,
                             mask_id=49, num_labels=0)  # fmt: skip
    # Equal values and training-only keys pass; pooling computes without new parameters.
    got = config_from_start(base, {"d_model": 32, "dropout": 0.3, "pooling": "mean"})
    assert (got.dropout, got.pooling, got.d_model) == (0.3, "mean", 32)
    # A preset's fields count as given: "small" has another width.
    with pytest.raises(ConfigError, match=r"model\.d_model"):
        config_from_start(base, {"preset": "small"})
    # The task's head fields may change; its other fields may not.
    got = config_from_start(base, {}, task_fields={"num_labels": 3}, head_fields=["num_labels"])
    assert got.num_labels == 3
    got = config_from_start(base, {"num_labels": 3}, head_fields=["num_labels"])  # or given
    assert got.num_labels == 3
    # Fields that follow the tokenizer keep the checkpoint's (its tokenizer is the one used).
    assert config_from_start(base, {}, task_fields={"vocab_size": 49}).vocab_size == 50
    with pytest.raises(ConfigError, match=r"model\.vocab_size"):  # unless given explicitly
        config_from_start(base, {"vocab_size": 60})
    with pytest.raises(ConfigError, match=r"model\.num_layer: unknown key; did you mean"):
        config_from_start(base, {"num_layer": 2})
    with pytest.raises(ConfigError, match="trains decoder_only"):
        config_from_start(base, {}, families=["decoder_only"])
    # ViT's class token is a parameter: pooling cls -> mean would drop it.
    vit = ViTConfig()
    with pytest.raises(ConfigError, match=r"model\.pooling: 'mean' would change the parameters"):
        config_from_start(vit, {"pooling": "mean"})


def _encoder_checkpoint(directory: Path, num_labels: int):
    """A tiny encoder-only model saved at ``directory``: ``(model, its config, the start)``."""
    from attnkit.models import build_model

    config = config_from_preset("encoder_only", "small", d_model=16, num_heads=2, d_ff=32,
                                num_layers=1, vocab_size=20, mask_id=19,
                                num_labels=num_labels)  # fmt: skip
    model = build_model(config)
    ckpt.save_checkpoint(directory, model_state=model.state_dict(), config=config.to_dict(),
                         tokenizer_json=_char_tokenizer_json())  # fmt: skip
    return model, config, load_warm_start(directory)


def test_load_weights_keeps_a_fresh_head_only_where_allowed(tmp_path):
    from attnkit.models import build_model

    model, config, initial = _encoder_checkpoint(tmp_path / "c", num_labels=0)
    bigger = build_model(config.replace(num_labels=3))
    assert initial.fresh is None  # not known before the weights went into a model
    fresh = initial.load_weights(bigger, head=("classifier",))
    assert sorted(fresh) == ["classifier.classifier.bias", "classifier.classifier.weight",
                             "classifier.pooler.bias", "classifier.pooler.weight"]  # fmt: skip
    assert initial.fresh == tuple(fresh) and initial.head == ("classifier",)
    assert torch.equal(bigger.embed.tokens.weight, model.embed.tokens.weight)
    with pytest.raises(CheckpointError, match="classifier"):
        initial.load_weights(build_model(config.replace(num_labels=3)))


def test_restart_keeps_fresh_rows_the_checkpoint_has_and_describe_names_them(tmp_path):
    """New labels of the same count: the classifier's rows start fresh anyway (``restart``);
    the start line names the fresh modules, not their parents (the pooler is the import's)."""
    from attnkit.models import build_model

    model, config, start = _encoder_checkpoint(tmp_path / "c", num_labels=2)
    again = build_model(config)
    start.load_weights(again, head=("classifier",))
    assert start.fresh == () and start.describe() == start.source.describe()
    torch.manual_seed(5)
    again = build_model(config)
    fresh = start.load_weights(again, head=("classifier",), restart=("classifier.classifier",))
    assert sorted(fresh) == ["classifier.classifier.bias", "classifier.classifier.weight"]
    assert not torch.equal(again.classifier.classifier.weight, model.classifier.classifier.weight)
    assert torch.equal(again.classifier.pooler.weight, model.classifier.pooler.weight)
    assert start.describe().endswith("; freshly initialised: classifier.classifier")
    assert start.base.path == start.source.checkpoint and start.base.sha256 == start.source.sha256


def test_count_parameters_looks_at_requires_grad():
    from attnkit.models import build_model

    model = build_model(config_from_preset("decoder_only", "small", d_model=16, num_heads=2,
                                           d_ff=32, num_layers=1, vocab_size=20))  # fmt: skip
    trainable, total = count_parameters(model)
    assert trainable == total == model.num_parameters()
    model.embed.tokens.weight.requires_grad_(False)  # tied to the output projection
    trainable, total = count_parameters(model)
    assert total - trainable == 20 * 16


def _char_tokenizer_json() -> str:
    from attnkit.data.tokenizers import CharTokenizer

    return CharTokenizer.train(["abcdefghij"]).to_json()


def test_a_vision_transformer_continues_on_new_classes_with_a_fresh_head(tmp_path):
    pytest.importorskip("sklearn")
    from PIL import Image

    from attnkit.training.loop import Trainer
    from attnkit.training.runconfig import RunConfig
    from attnkit.training.tasks import task_from_run

    tiny = {"d_model": 16, "num_heads": 2, "d_ff": 32, "num_layers": 1, "dropout": 0.0}
    train = {"max_steps": 2, "max_tokens": 320, "schedule": "constant", "lr": 3e-3,
             "warmup_steps": 0, "eval_every": 100, "save_every": 0}  # fmt: skip
    digits = RunConfig.from_dict({"task": "image_classification", "data": {"images": "digits"},
                                  "model": tiny, "train": train})  # fmt: skip
    trainer = Trainer(digits, task_from_run(digits), tmp_path / "digits", progress=False)
    trainer.fit()
    # Three classes of 8x8 grey pictures: the digits' ten-way head does not fit.
    pics = tmp_path / "pics"
    pics.mkdir()
    rows = ["filename,label"]
    for i in range(9):
        Image.new("L", (8, 8), color=i * 25).save(pics / f"im{i}.png")
        rows.append(f"im{i}.png,{'abc'[i % 3]}")
    (pics / "labels.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    run = RunConfig.from_dict({"task": "image_classification",
                               "data": {"dir": str(tmp_path), "images": "pics",
                                        "valid_fraction": 0.0},
                               "train": train})  # fmt: skip
    initial = load_warm_start(tmp_path / "digits")
    task = task_from_run(run, None, initial)
    assert task.model_config.class_names == ("a", "b", "c")
    assert task.model_config.d_model == 16  # the checkpoint's, not the digits preset's 64
    model = Trainer(run, task, tmp_path / "pics_run", progress=False).model
    for name, value in initial.state.items():
        if name.startswith("head."):
            assert model.state_dict()[name].shape[0] == 3
        else:
            assert torch.equal(model.state_dict()[name], value), name


# -- continuing a translation model on new data -----------------------------------------

TRANSLATION = """
task: translation
data: {{dir: {dir}, src_lang: de, tgt_lang: en, train: {train}, valid: null, max_len: 64}}
tokenizer: {{kind: char}}
model: {{preset: small, d_model: 32, num_heads: 2, d_ff: 64, num_encoder_layers: 1,
        num_decoder_layers: 1, max_len: 64}}
train: {{max_steps: 30, max_tokens: 600, warmup_steps: 5, lr: 2.0, log_every: 1,
        eval_every: 1000, save_every: 0, valid_bleu_sentences: 0}}
"""


def _parallel(root: Path, name: str, pairs: list[tuple[str, str]]) -> None:
    (root / f"{name}.de").write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
    (root / f"{name}.en").write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")


@pytest.fixture(scope="module")
def de_en_run(tmp_path_factory) -> Path:
    """A tiny German -> English model of the numbers (the synthetic Multi30k stand-in)."""
    from attnkit.data.synthetic import number_splits

    root = tmp_path_factory.mktemp("de_en")
    splits = number_splits(200, 10, 10, low=1, high=499, seed=0)
    _parallel(root, "old", [(t, s) for s, t in splits["train"]])  # number_splits is en -> de
    config = root / "base.yaml"
    config.write_text(TRANSLATION.format(dir=root, train="old"), encoding="utf-8")
    out = root / "base"
    assert main(["train", "--config", str(config), "--out", str(out), "--no-progress"]) == 0
    return out


def test_a_translation_model_continues_with_its_own_tokenizer_and_the_same_loss(
    de_en_run, tmp_path, capsys
):
    from attnkit.data.synthetic import number_splits
    from attnkit.training.runconfig import load_run_config
    from attnkit.training.tasks import task_from_run
    from attnkit.training.tasks.base import TaskContext

    root = de_en_run.parent
    new = number_splits(120, 10, 10, low=500, high=999, seed=3)["train"]
    _parallel(root, "new", [(t, s) for s, t in new])
    config = tmp_path / "more.yaml"
    # No model section: the model is the checkpoint's; dropout 0 so the first training
    # loss is the checkpoint's own loss on the first batch.
    config.write_text(
        TRANSLATION.format(dir=root, train="new").replace(
            "model: {preset: small, d_model: 32, num_heads: 2, d_ff: 64, num_encoder_layers: 1,\n"
            "        num_decoder_layers: 1, max_len: 64}",
            "model: {dropout: 0.0}",
        ),
        encoding="utf-8",
    )
    out = tmp_path / "more"
    assert main(["train", "--config", str(config), "--out", str(out), "--no-progress",
                 "--init", str(de_en_run), "--set", "train.max_steps=2"]) == 0  # fmt: skip
    first = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])
    assert first["split"] == "train" and first["step"] == 1
    # The checkpoint's loss on that same first batch, computed apart from the trainer.
    run = load_run_config(config)
    initial = load_warm_start(de_en_run)
    task = task_from_run(run, None, initial)
    task.setup(TaskContext())
    batch, _ = task.next_batch()
    model = ckpt.load_model(de_en_run, "cpu").model
    model.train()  # as in training; dropout is 0 (the new run's setting, not the old model's)
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    sums = task.loss(model, batch)
    assert first["loss"] == pytest.approx(float(sums.loss.detach()) / sums.tokens, rel=1e-5)
    assert task.tokenizer.to_json() == initial.tokenizer.to_json()


def test_unknown_tokens_in_the_new_data_are_reported(de_en_run, tmp_path, capsys):
    root = tmp_path
    # "ß" and "ü" are in German numbers; "Q", "x", "@" never were: the char vocabulary lacks them.
    _parallel(root, "odd", [("Qxü zwei @", "two"), ("drei", "three x")] * 20)
    config = tmp_path / "odd.yaml"
    config.write_text(TRANSLATION.format(dir=root, train="odd"), encoding="utf-8")
    capsys.readouterr()
    assert main(["train", "--config", str(config), "--out", str(tmp_path / "o"), "--no-progress",
                 "--init", str(de_en_run), "--set", "train.max_steps=1"]) == 0  # fmt: skip
    printed = capsys.readouterr().out
    tok = ckpt.load_model(de_en_run, "cpu").tokenizer
    src = [tok.encode(s) for s in ["Qxü zwei @", "drei"] * 20]
    share = sum(x.count(tok.unk_id) for x in src) / sum(len(x) for x in src)
    assert share > 0
    assert (
        f"unknown tokens (mapped to the tokenizer's unknown id): {100 * share:.2f}% of source"
        in printed
    )


def test_a_checkpoint_of_gguf_blocks_starts_from_its_exact_float_weights(tmp_path):
    """``import --from gguf --keep-quantized`` stores block linears (and the tied output
    layer's blocks apart from the token table): ``--init`` of it reads the float weights a
    plain import of the same file holds, bit for bit, the output layer tied again."""
    from gguf_helpers import hf_weights, metadata, to_gguf, write_gguf

    from attnkit.interop.gguf.importer import import_gguf

    source = write_gguf(tmp_path / "q8.gguf", to_gguf(hf_weights()), metadata(), quant="Q8_0")
    kept = load_warm_start(import_gguf(source, tmp_path / "kept", keep_quantized=True))
    plain = load_warm_start(import_gguf(source, tmp_path / "plain"))
    assert not any(k.endswith(("_int8", "_int4")) for k in kept.state)
    assert kept.state.keys() == plain.state.keys()
    assert all(torch.equal(kept.state[k], plain.state[k]) for k in plain.state)
