"""A catalogue of bad inputs, each run through the real CLI in a child process.

One row per case: what is broken, the command, the exit code (2: usage or
config, 1: data or checkpoint at run time) and two substrings of the error:
*where* (the file, line or field at fault) and *hint* (what to do). For every
row the test checks that

* the process exits with that code and prints nothing on standard output;
* standard error is exactly one line, without a traceback, holding both substrings;
* nothing on disk changed: no file created, removed, rewritten or touched
  (the shared training run, the data and the test's own directory are
  snapshotted before and compared after).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from reliability_helpers import (
    TrainedRun,
    cli,
    lines,
    snapshot,
    write_config,
    write_corpus,
    write_lines,
)


@dataclass
class Ctx:
    """What a row's command builder may use; it writes its inputs under ``tmp``."""

    tmp: Path
    trained: TrainedRun
    lm: Path

    # -- data and configs ----------------------------------------------------------

    def data(self, **changes: Callable[[Path], object]) -> Path:
        """A good corpus in ``tmp/data`` with some files changed: ``train_en=fn(path)``."""
        directory = write_corpus(self.tmp / "data")
        for name, change in changes.items():
            change(directory / name.replace("_", "."))
        return directory

    def train(self, *extra: str, data: Path | None = None, config: str | None = None) -> list[str]:
        """``attnkit train`` on the tiny config; ``config`` replaces the YAML text."""
        data = data or self.data()
        path = write_config(self.tmp / "tiny.yaml", data, text=config)
        return ["train", "--config", str(path), "--out", str(self.tmp / "out"),
                "--no-progress", *extra]  # fmt: skip

    def yaml(self, old: str, new: str) -> str:
        """The tiny config's text with ``old`` replaced by ``new``."""
        text = write_config(self.tmp / "base.yaml", self.data()).read_text(encoding="utf-8")
        (self.tmp / "base.yaml").unlink()
        assert old in text, old
        return text.replace(old, new)

    def text(self, name: str, content: str | bytes) -> Path:
        path = self.tmp / name
        path.write_bytes(content.encode() if isinstance(content, str) else content)
        return path

    # -- checkpoints ---------------------------------------------------------------

    def checkpoint(self, change: Callable[[Path], object] | None = None) -> Path:
        """A copy of the trained checkpoint in ``tmp/checkpoint``, then ``change(dir)``."""
        directory = self.tmp / "checkpoint"
        shutil.copytree(self.trained.checkpoint, directory)
        if change is not None:
            change(directory)
        return directory

    def run_copy(self, change: Callable[[Path], object] | None = None) -> Path:
        """A copy of the trained run in ``tmp/run``, then ``change(its checkpoint)``."""
        run = self.tmp / "run"
        shutil.copytree(self.trained.run, run)
        if change is not None:
            change(run / "checkpoints" / self.trained.checkpoint.name)
        return run

    def evaluate(self, *extra: str) -> list[str]:
        """``attnkit evaluate`` of the trained checkpoint on copies of the test files."""
        src = write_lines(self.tmp / "test.en", lines("test", 0))
        ref = write_lines(self.tmp / "test.de", lines("test", 1))
        return ["evaluate", "--checkpoint", str(self.trained.checkpoint), "--src", str(src),
                "--ref", str(ref), *extra]  # fmt: skip

    def special(self, kind: str) -> Path:
        """A FIFO, a character device (made with mknod: CI runs as root), a dangling link,
        a directory or a file, at ``tmp/KIND``."""
        path = self.tmp / kind
        if kind == "fifo":
            os.mkfifo(path)
        elif kind == "device":
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # like /dev/null
        elif kind == "dangling":
            path.symlink_to(self.tmp / "nowhere")
        elif kind.endswith("dir.png") or kind == "dir":
            path.mkdir()
        else:
            path.write_text("x\n")
        return path

    def touch(self, name: str) -> list[str]:
        """Create the file ``tmp/NAME``; returns no arguments (for use inside an argv)."""
        (self.tmp / name).write_text("x\n")
        return []

    def translate(self, checkpoint: Path | None = None, *extra: str) -> list[str]:
        source = self.text("in.txt", "one hundred\nforty-two\n")
        return ["translate", "--checkpoint", str(checkpoint or self.trained.checkpoint),
                "--input", str(source), *extra]  # fmt: skip


# -- ways to break a file ------------------------------------------------------------


def drop_last_line(path: Path) -> None:
    write_lines(path, path.read_text(encoding="utf-8").splitlines()[:-1])


def empty_line(number: int) -> Callable[[Path], None]:
    def change(path: Path) -> None:
        text_lines = path.read_text(encoding="utf-8").splitlines()
        text_lines[number - 1] = ""
        write_lines(path, text_lines)

    return change


def bad_utf8(number: int) -> Callable[[Path], None]:
    def change(path: Path) -> None:
        raw = path.read_bytes().split(b"\n")
        raw[number - 1] = b"caf\xe9"  # Latin-1, not UTF-8
        path.write_bytes(b"\n".join(raw))

    return change


def to_dev_zero(path: Path) -> None:
    """A link to /dev/zero, which never ends: read whole, it would fill memory."""
    path.unlink()
    path.symlink_to("/dev/zero")


def make_directory(path: Path) -> None:
    path.unlink()
    path.mkdir()


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def edit_json(name: str, **changes) -> Callable[[Path], None]:
    def change(directory: Path) -> None:
        path = directory / name
        data = json.loads(path.read_text(encoding="utf-8"))
        for key, value in changes.items():
            if callable(value):
                data[key] = value(data[key])
            else:
                data[key] = value
        path.write_text(json.dumps(data), encoding="utf-8")

    return change


def pickle_as(name: str, *, remove_model: bool = False) -> Callable[[Path], None]:
    """Write a ``torch.save`` pickle under ``name`` (and drop model.safetensors if asked)."""

    def change(directory: Path) -> None:
        if remove_model:
            (directory / "model.safetensors").unlink()
        torch.save({"w": torch.zeros(2)}, directory / name)

    return change


def huge_header(directory: Path) -> None:
    # A length prefix claiming a 1 TB JSON header, followed by a plausible "{".
    (directory / "model.safetensors").write_bytes(struct.pack("<Q", 1 << 40) + b'{"a": 1}')


def oversized(name: str, megabytes: int) -> Callable[[Path], None]:
    def change(directory: Path) -> None:
        path = directory / name
        data = json.loads(path.read_text(encoding="utf-8"))
        data["padding"] = "x" * (megabytes << 20)
        path.write_text(json.dumps(data), encoding="utf-8")

    return change


def bigger_vocabulary(directory: Path) -> None:
    path = directory / "tokenizer.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data["pieces"] = data["pieces"] + [f"extra{i}" for i in range(5)]
    path.write_text(json.dumps(data), encoding="utf-8")


# -- the catalogue -------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    id: str
    argv: Callable[[Ctx], list[str]]
    code: int  # 2: usage or config error; 1: data or checkpoint error at run time
    where: str | Callable[[Ctx], str]  # names the file, line or field
    hint: str  # says what to do, or what is expected


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
    # -- command-line arguments -----------------------------------------------------
    Case("args/translate-beam-0",
         lambda c: c.translate(None, "--beam", "0"), 2, "--beam", "must be >= 1"),
    Case("args/translate-negative-temperature",
         lambda c: c.translate(None, "--sample", "--temperature", "-1"), 2,
         "--temperature", "must be > 0"),
    Case("args/translate-top-p-above-1",
         lambda c: c.translate(None, "--sample", "--top-p", "1.5"), 2,
         "--top-p", "must be in (0, 1]"),
    Case("args/generate-negative-temperature",
         lambda c: ["generate", "--checkpoint", str(c.lm), "--temperature", "-0.5"], 2,
         "--temperature", "must be >= 0"),
    Case("args/missing-checkpoint-directory",
         lambda c: c.translate(c.tmp / "no_such_run"), 1,
         "no_such_run", "checkpoint directory not found"),
    Case("args/resume-with-nothing-to-resume",
         lambda c: c.train("--resume"), 2,
         "nothing to resume", "without --resume"),
    Case("args/existing-run-without-resume-or-overwrite",
         lambda c: [*c.train()[:4], str(c.trained.run)], 2,
         lambda c: str(c.trained.run), "pass --resume to continue it or --overwrite"),
    Case("args/unknown-option",
         lambda c: c.translate(None, "--beem", "3"), 2,
         "unrecognized arguments: --beem", "--help"),
    Case("args/average-out-exists",
         lambda c: ["average", "--checkpoints", str(c.trained.checkpoint),
                    "--out", str(c.trained.run)], 2,
         lambda c: str(c.trained.run), "--overwrite"),
    Case("args/attention-out-not-png",
         lambda c: ["attention", "--checkpoint", str(c.trained.checkpoint), "--text", "one",
                    "--out", str(c.tmp / "map.txt")], 2,
         "--out", ".png"),
    # -- checkpoints ----------------------------------------------------------------
    Case("checkpoint/truncated-weights",
         lambda c: c.translate(c.checkpoint(lambda d: truncate(d / "model.safetensors"))), 1,
         "model.safetensors", "truncated"),
    Case("checkpoint/missing-config",
         lambda c: c.translate(c.checkpoint(lambda d: (d / "config.json").unlink())), 1,
         "config.json: file not found", "every checkpoint"),
    Case("checkpoint/invalid-config-json",
         lambda c: c.translate(c.checkpoint(lambda d: (d / "config.json").write_text("{"))), 1,
         "config.json", "invalid JSON"),
    Case("checkpoint/other-architecture",
         lambda c: c.translate(c.checkpoint(edit_json("config.json", d_model=64))), 1,
         "model.safetensors", "config.json"),
    Case("checkpoint/decoder-only-given-to-translate",
         lambda c: c.translate(c.lm), 1,
         "config.json", "attnkit generate"),
    Case("checkpoint/translation-given-to-generate",
         lambda c: ["generate", "--checkpoint", str(c.trained.checkpoint)], 1,
         "config.json", "attnkit translate"),
    Case("checkpoint/vocabulary-mismatch",
         lambda c: c.translate(c.checkpoint(bigger_vocabulary)), 1,
         "tokenizer.json", "tgt_vocab_size"),
    Case("checkpoint/pickle-posing-as-safetensors",
         lambda c: c.translate(c.checkpoint(pickle_as("model.safetensors"))), 1,
         "model.safetensors", "refusing to unpickle"),
    Case("checkpoint/pytorch-model-bin",
         lambda c: c.translate(c.checkpoint(pickle_as("pytorch_model.bin", remove_model=True))),
         1, "pytorch_model.bin", "convert"),
    Case("checkpoint/model-pt-to-average",
         lambda c: ["average", "--checkpoints",
                    str(c.checkpoint(pickle_as("model.pt", remove_model=True))),
                    "--out", str(c.tmp / "avg")], 1,
         "model.pt", "convert"),
    Case("checkpoint/huge-safetensors-header",
         lambda c: c.translate(c.checkpoint(huge_header)), 1,
         "model.safetensors", "limit"),
    Case("checkpoint/oversized-config-json",
         lambda c: c.translate(c.checkpoint(oversized("config.json", 2))), 1,
         "config.json", "limit"),
    Case("checkpoint/truncated-weights-to-evaluate",
         lambda c: ["evaluate", "--checkpoint",
                    str(c.checkpoint(lambda d: truncate(d / "model.safetensors"))),
                    "--src", str(c.trained.data / "test.en"),
                    "--ref", str(c.trained.data / "test.de")], 1,
         "model.safetensors", "truncated"),
    # -- output paths (attnkit.outputs): never a device, FIFO, link's odd target or input --
    Case("output/hyp-out-is-the-source",
         lambda c: c.evaluate("--hyp-out", str(c.tmp / "test.en")), 2,
         "--hyp-out", "is also an input of this command"),
    Case("output/hyp-out-is-a-device",
         lambda c: c.evaluate("--hyp-out", str(c.special("device"))), 2,
         "device", "not a regular file"),
    Case("output/hyp-out-is-a-fifo",
         lambda c: c.evaluate("--hyp-out", str(c.special("fifo"))), 2,
         "fifo", "a FIFO (named pipe), not a regular file"),
    Case("output/hyp-out-is-a-dangling-link",
         lambda c: c.evaluate("--hyp-out", str(c.special("dangling"))), 2,
         "dangling", "does not exist"),
    Case("output/hyp-out-inside-the-checkpoint",
         lambda c: c.evaluate("--hyp-out", str(c.trained.checkpoint / "model.safetensors")), 2,
         "model.safetensors", "lies inside the input"),
    Case("output/attention-out-is-a-directory",
         lambda c: ["attention", "--checkpoint", str(c.trained.checkpoint), "--text", "one",
                    "--out", str(c.special("dir.png"))], 2,
         "dir.png", "is a directory, not a regular file"),
    Case("output/explore-out-under-a-file",
         lambda c: ["explore", "--checkpoint", str(c.trained.checkpoint), "--text", "one",
                    "--out", str(c.special("file") / "page.html")], 2,
         "page.html", "is a file, not a directory"),
    Case("output/train-out-is-a-device",
         lambda c: [*c.train()[:4], str(c.special("device"))], 2,
         "device", "character device, not a directory"),
    Case("output/train-overwrite-of-the-data",
         lambda c: [*c.train()[:4], str(c.tmp / "data"), "--overwrite"], 2,
         "--out", "is also an input of this command"),
    Case("output/train-overwrite-of-other-files",
         lambda c: [*c.train()[:4], str(c.special("dir")), "--overwrite",
                    *c.touch("dir/notes.txt")], 2,
         "notes.txt", "--overwrite replaces only a run"),
    Case("output/average-out-holds-its-input",
         lambda c: ["average", "--run", str(c.run_copy()), "--out", str(c.tmp / "run"),
                    "--overwrite"], 2,
         "--out", "which replacing it would delete"),
    Case("output/import-out-is-its-source",
         lambda c: ["import", "--from", "hf", str(c.trained.checkpoint), "--out",
                    str(c.trained.checkpoint), "--overwrite"], 2,
         "--out", "is also an input of this command"),
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
    Case("args/quickstart-minutes-nan",
         lambda c: ["quickstart", "--minutes", "nan", "--out", str(c.tmp / "qs")], 2,
         "--minutes", "must be a finite number"),
    Case("args/translate-seed-beyond-64-bits",
         lambda c: c.translate(None, "--sample", "--seed", str(1 << 64)), 2,
         "--seed", "a seed must be in [0, 2**63)"),
    Case("args/translate-beam-beyond-memory",
         lambda c: c.translate(None, "--beam", "10000000000"), 2,
         "--beam 10000000000", "GiB of memory"),
    Case("args/translate-input-is-dev-zero",
         lambda c: c.translate(None)[:3] + ["--input", "/dev/zero"], 2,
         "/dev/zero", "is a character device, not a text file"),
    *([] if torch.cuda.is_available() else [
        Case("args/device-cuda-without-cuda",
             lambda c: c.translate(None, "--device", "cuda"), 2,
             "--device", "CUDA is not available"),
    ]),
    Case("checkpoint/optimizer-json-holding-a-list",
         lambda c: [*c.train("--resume")[:4], str(c.run_copy(
             lambda d: (d / "optimizer.json").write_text("[]"))), "--resume"], 1,
         "optimizer.json", "not an optimizer state"),
    Case("checkpoint/negative-step-in-trainer-state",
         lambda c: [*c.train("--resume")[:4], str(c.run_copy(
             edit_json("trainer_state.json", step=-2))), "--resume"], 1,
         "trainer_state.json", "step must be an integer >= 0, got -2"),
    Case("checkpoint/positions-beyond-memory",
         lambda c: c.translate(c.checkpoint(edit_json("config.json", max_len=10**12))), 1,
         "config.json", "GiB of memory"),
    Case("checkpoint/config-json-nested-deeply",
         lambda c: c.translate(c.checkpoint(
             lambda d: (d / "config.json").write_text("[" * 100000 + "]" * 100000))), 1,
         "config.json", "nested too deeply"),
]  # fmt: skip


def test_the_catalogue_has_at_least_75_cases():
    assert len(CASES) >= 75
    assert len({case.id for case in CASES}) == len(CASES)


PREPARING = ("preparing ", "reusing ", "trained a ", "encoded ", "  ... ")


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_bad_input_gives_one_line_and_changes_nothing(case, trained, lm_checkpoint, tmp_path):
    ctx = Ctx(tmp_path, trained, lm_checkpoint)
    argv = case.argv(ctx)
    roots = (tmp_path, trained.root, lm_checkpoint.parent)
    before = snapshot(*roots)

    result = cli(*argv, cwd=tmp_path)

    err = result.stderr
    where = case.where(ctx) if callable(case.where) else case.where
    assert "Traceback" not in err, err
    assert err.count("\n") == 1 and err.endswith("\n") and err.strip(), err
    assert where in err, err
    assert case.hint in err, err
    assert result.returncode == case.code, err
    # Nothing on stdout but the notes of data preparation that began before the input
    # was found bad (its cache lives outside these roots and is never half-written).
    progress = [line for line in result.stdout.splitlines() if not line.startswith(PREPARING)]
    assert progress == [], result.stdout
    assert snapshot(*roots) == before, "the command changed files on disk"
