"""Bad-input catalogue (see ``test_bad_input_catalogue.py``): data files and run configs."""

from __future__ import annotations

from pathlib import Path

import pytest
from catalogue_helpers import (
    Case,
    Ctx,
    bad_utf8,
    check,
    drop_last_line,
    empty_line,
    make_directory,
    to_dev_zero,
)
from reliability_helpers import lines, write_lines


def classifier(c: Ctx, model: str) -> str:
    """A tiny text-classification config (labelled examples in ``tmp``) with ``model``
    appended to its model section."""
    c.text("labelled.tsv", "label\ttext\npos\tgood cat\nneg\tbad dog\n")
    return (
        "task: text_classification\n"
        f"data: {{dir: {c.tmp}, train: labelled.tsv, valid: labelled.tsv, max_len: 16}}\n"
        "tokenizer: {kind: char}\n"
        f"model: {{d_model: 16, num_heads: 2, d_ff: 32, num_layers: 1, max_len: 16, {model}}}\n"
        "train: {max_steps: 1, batch_size: 2, warmup_steps: 0, log_every: 1, save_every: 0}\n"
    )


CASES = [
    # -- data files -----------------------------------------------------------------
    Case("data/mismatched-line-counts",
         lambda c: c.train(data=c.data(train_de=drop_last_line)), 1,
         "train.de has 59", "one sentence per line"),
    Case("data/empty-file",
         lambda c: c.train(data=c.data(valid_en=lambda p: p.write_bytes(b""))), 1,
         "valid.en: file is empty", "one sentence per line"),
    Case("data/empty-line",
         lambda c: c.train(data=c.data(train_en=empty_line(3))), 1,
         "train.en:3: empty line", "data.skip_empty: true"),
    Case("data/invalid-utf8",
         lambda c: c.train(data=c.data(train_de=bad_utf8(2))), 1,
         "train.de:2: not valid UTF-8", "convert the file to UTF-8"),
    Case("data/directory-instead-of-file",
         lambda c: c.train(data=c.data(train_en=make_directory)), 1,
         "train.en: is a directory", "expected a text file"),
    Case("data/missing-file",
         lambda c: c.train(data=c.data(valid_de=Path.unlink)), 1,
         "valid.de: file not found", "data.dir"),
    Case("data/dir-is-a-file",
         lambda c: c.train("--set", f"data.dir={c.text('notadir', 'x')}"), 1,
         "notadir: is a file, not a directory", "data.dir"),
    Case("data/all-pairs-too-long",
         lambda c: c.train("--set", "data.max_len=3"), 2,
         "data.max_len", "raise data.max_len"),
    Case("data/evaluate-mismatched",
         lambda c: ["evaluate", "--checkpoint", str(c.trained.checkpoint),
                    "--src", str(write_lines(c.tmp / "test.en", lines("test", 0))),
                    "--ref", str(write_lines(c.tmp / "test.de", lines("test", 1)[:-2]))], 1,
         "test.de has 4", "one sentence per line"),
    Case("data/evaluate-empty-line",
         lambda c: ["evaluate", "--checkpoint", str(c.trained.checkpoint),
                    "--src", str(write_lines(c.tmp / "test.en", ["one", "", "two"])),
                    "--ref", str(write_lines(c.tmp / "test.de", ["eins", "null", "zwei"]))], 1,
         "test.en:2: empty line", "--skip-empty"),
    Case("data/translate-invalid-utf8",
         lambda c: ["translate", "--checkpoint", str(c.trained.checkpoint),
                    "--input", str(c.text("in.txt", b"one\ncaf\xe9\n"))], 1,
         "in.txt:2: not valid UTF-8", "convert the file to UTF-8"),
    Case("data/train-file-is-dev-zero",
         lambda c: c.train(data=c.data(train_en=to_dev_zero)), 1,
         "train.en: is a character device", "not a text file"),
    Case("data/translate-missing-input",
         lambda c: ["translate", "--checkpoint", str(c.trained.checkpoint),
                    "--input", str(c.tmp / "missing.txt")], 1,
         "missing.txt: file not found", "check the path"),
    # -- run configs ----------------------------------------------------------------
    Case("config/unknown-key",
         lambda c: c.train(config=c.yaml("max_steps:", "max_step:")), 2,
         "train.max_step: unknown key", "did you mean 'train.max_steps'?"),
    Case("config/wrong-type",
         lambda c: c.train("--set", "train.max_steps=ten"), 2,
         "train.max_steps", "expected int, got str"),
    Case("config/out-of-range",
         lambda c: c.train("--set", "train.max_tokens=0"), 2,
         "train.max_tokens", "must be >= 1, got 0"),
    Case("config/d-model-not-divisible",
         lambda c: c.train("--set", "model.d_model=30", "--set", "model.num_heads=4"), 2,
         "model.d_model", "not divisible by num_heads=4"),
    Case("config/tokenizer-vocab-below-specials",
         lambda c: c.train("--set", "tokenizer.kind=bpe", "--set", "tokenizer.vocab_size=4"), 2,
         "tokenizer.vocab_size", "must be >= 8"),
    Case("config/model-vocab-below-specials",
         lambda c: c.train("--set", "model.src_vocab_size=2", "--set", "model.tgt_vocab_size=2"),
         2, "model.src_vocab_size", "special tokens"),
    Case("config/model-vocab-below-tokenizer",
         lambda c: c.train("--set", "model.src_vocab_size=10", "--set", "model.tgt_vocab_size=10"),
         2, "model.src_vocab_size", "tokenizer"),
    Case("config/invalid-yaml",
         lambda c: c.train(config=c.yaml("tokenizer: {kind: char}", "tokenizer: {kind: char")), 2,
         "tiny.yaml line", "not valid YAML (expected ',' or '}'"),
    Case("config/not-utf8",
         lambda c: ["train", "--config", str(c.text("latin1.yaml", b"task: caf\xe9\n")),
                    "--out", str(c.tmp / "out")],
         2, "latin1.yaml", "not UTF-8"),
    Case("config/model-positions-below-longest-pair",
         lambda c: c.train("--set", "model.max_len=8"), 2,
         "model.max_len: 8 positions", "data.max_len"),
    Case("config/unknown-section",
         lambda c: c.train(config=c.yaml("decode:", "decoding:")), 2,
         "decoding: unknown section", "did you mean 'decode'?"),
    Case("config/unknown-preset",
         lambda c: c.train("--set", "model.preset=huge"), 2,
         "model.preset", "choose from"),
    Case("config/missing-config-file",
         lambda c: ["train", "--config", str(c.tmp / "nope.yaml"), "--out", str(c.tmp / "out")],
         2, "nope.yaml", "not found"),
    Case("config/bad-set-syntax",
         lambda c: c.train("--set", "train.max_steps"), 2,
         "--set train.max_steps", "expected key=value"),
    # -- numbers, nesting and sizes (checked before anything is written) ----------------
    Case("config/lr-infinite",
         lambda c: c.train("--set", "train.lr=.inf"), 2,
         "train.lr", "must be a finite number"),
    Case("config/negative-seed",
         lambda c: c.train("--set", "train.seed=-1"), 2,
         "train.seed", "must be in [0, 2**63)"),
    Case("config/seed-beyond-64-bits",
         lambda c: c.train("--set", "train.seed=18446744073709551616"), 2,
         "train.seed", "below 2**63"),
    Case("config/grad-accum-beyond-the-ceiling",
         lambda c: c.train("--set", "train.grad_accum=100000000000000000000"), 2,
         "train.grad_accum", "must be below 2**63"),
    Case("config/tokenizer-vocab-of-10-to-the-12",
         lambda c: c.train("--set", "tokenizer.kind=bpe",
                           "--set", "tokenizer.vocab_size=1000000000000"), 2,
         "tokenizer.vocab_size", "must be <= 16777216"),
    Case("config/positions-beyond-memory",
         lambda c: c.train("--set", "model.max_len=1000000000000"), 2,
         "the model section", "GiB of memory"),
    Case("config/layers-beyond-the-ceiling",
         lambda c: c.train("--set", "model.num_encoder_layers=1000000000"), 2,
         "model.num_encoder_layers", "must be <= 1024"),
    Case("config/nested-3000-deep",
         lambda c: ["train", "--config",
                    str(c.text("deep.yaml", "model: " + "[" * 3000 + "]" * 3000 + "\n")),
                    "--out", str(c.tmp / "out")], 2,
         "deep.yaml", "nested too deeply"),
    # -- a list field holding a mapping: the item named, not 'expected tuple, got tuple' --
    Case("config/label-names-holding-a-mapping",
         lambda c: c.train(config=classifier(c, "label_names: [neg, {a: 2}]")), 2,
         "model.label_names[1]", "expected str, got dict {'a': 2}"),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_bad_input_gives_one_line_and_changes_nothing(case, trained, lm_checkpoint, tmp_path):
    check(case, trained, lm_checkpoint, tmp_path)
