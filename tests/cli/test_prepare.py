"""``attnkit prepare``: prepares once, reuses, says why it rebuilds; ``train`` reuses it."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from attnkit.cli.main import main
from attnkit.data.synthetic import number_splits

CONFIG = """
data: {{dir: {dir}, src_lang: en, tgt_lang: de, valid: null, max_len: 64, cache_dir: {cache}}}
tokenizer: {{kind: bpe, vocab_size: 60}}
model: {{preset: small, d_model: 32, num_heads: 2, d_ff: 64,
        num_encoder_layers: 1, num_decoder_layers: 1, max_len: 96}}
train: {{max_steps: 2, max_tokens: 300, warmup_steps: 1, log_every: 1, save_every: 0}}
"""


def run(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(list(args))
    return code, out.getvalue()


@pytest.fixture
def config(tmp_path: Path) -> Path:
    pairs = number_splits(80, 0, 0, low=1, high=999, seed=0)["train"]
    (tmp_path / "train.en").write_text("".join(s + "\n" for s, _ in pairs))
    (tmp_path / "train.de").write_text("".join(t + "\n" for _, t in pairs))
    path = tmp_path / "run.yaml"
    path.write_text(CONFIG.format(dir=tmp_path, cache=tmp_path / "cache"))
    return path


def test_prepare_then_reuse_then_rebuild_with_the_reason(config: Path, tmp_path: Path) -> None:
    code, out = run("prepare", "--config", str(config))
    lines = out.splitlines()
    assert code == 0 and lines[0].startswith("preparing") and "trained a bpe tokenizer" in out
    summary = json.loads(lines[-1])
    assert summary["pairs"] == 80 and summary["dtype"] == "uint16"
    assert [Path(d).parent for d in summary["data"]] == [tmp_path / "cache"]

    code, out = run("prepare", "--config", str(config))
    assert code == 0 and [x.split()[0] for x in out.splitlines()[:2]] == ["reusing", "reusing"]

    code, out = run("train", "--config", str(config), "--out", str(tmp_path / "run"),
                    "--no-progress")  # fmt: skip
    assert code == 0 and out.startswith("reusing") and "80 training pairs" in out

    code, out = run("prepare", "--config", str(config), "--set", "tokenizer.vocab_size=70")
    assert "tokenizer.vocab_size 60 -> 70" in out
    with open(tmp_path / "train.de", "a") as f:
        f.write("extra\n")
    with open(tmp_path / "train.en", "a") as f:
        f.write("extra\n")
    code, out = run("prepare", "--config", str(config))
    assert code == 0 and f"{(tmp_path / 'train.de').resolve()} changed (size" in out


def test_prepare_refuses_what_has_nothing_to_prepare(config: Path, capsys) -> None:
    assert main(["prepare", "--config", str(config), "--set", "data.loading=memory"]) == 2
    assert "data.loading: memory encodes the data on every run" in capsys.readouterr().err
    vit = config.with_name("vit.yaml")
    vit.write_text("task: image_classification\ndata: {images: digits}\n")
    assert main(["prepare", "--config", str(vit)]) == 2
    assert "reads no text" in capsys.readouterr().err
