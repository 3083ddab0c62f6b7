"""attnkit export --to onnx: logits within 1e-4 of PyTorch, the runner searches as attnkit."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from attnkit.checkpoints.loading import load_model
from attnkit.cli.main import main
from attnkit.engines import onnx_runner  # needs onnxruntime (dev extra): fails loudly without
from attnkit.inference import translate_texts

MAX_LEN_B = 6


@pytest.fixture(scope="module")
def onnx_export(bpe_checkpoint, tmp_path_factory):
    out = tmp_path_factory.mktemp("onnx") / "model"
    args = ["export", "--checkpoint", str(bpe_checkpoint), "--to", "onnx", "--out", str(out)]
    assert main(args) == 0
    return out


def test_files_and_config(onnx_export):
    names = {p.name for p in onnx_export.iterdir()}
    assert {"encoder.onnx", "decoder.onnx", "config.json", "tokenizer.json"} <= names
    meta = json.loads((onnx_export / "config.json").read_text())
    assert meta["opset"] >= 17 and meta["format"] == "attnkit-onnx"


def test_logits_within_1e4_of_pytorch(onnx_export, bpe_checkpoint):
    model = load_model(bpe_checkpoint, "cpu").model
    stepper = onnx_runner.OnnxStepper(onnx_export, threads=1)
    src = torch.randint(4, model.config.src_vocab_size, (3, 9))
    src[1, 6:] = model.pad_id
    src[2, 3:] = model.pad_id
    ours, theirs = model.start(src), stepper.start(src)
    tokens = torch.full((3,), model.bos_id)
    for _ in range(6):
        with torch.no_grad():
            expected, ours = model.step(tokens, ours)
        got, theirs = stepper.step(tokens, theirs)
        assert (got - expected).abs().max().item() <= 1e-4
        tokens = expected.argmax(-1)
    assert theirs.past_k.shape[3] == 6


TEXTS = ["ein Haus am See", "zwei Hunde", "a dog runs fast by the lake", "Kinder <s> ß",
         "the house", "spielen im Garten schnell", "", "  "]  # fmt: skip


@pytest.mark.parametrize("beam,alpha", [(1, 0.6), (4, 0.6), (4, 0.0)])
def test_runner_translates_as_attnkit(onnx_export, bpe_checkpoint, beam, alpha):
    loaded = load_model(bpe_checkpoint, "cpu")
    stepper, tokenizer = onnx_runner.load(onnx_export, threads=1)
    kw = dict(beam=beam, alpha=alpha, max_len_b=MAX_LEN_B)
    expected = translate_texts(loaded.model, loaded.tokenizer, TEXTS, **kw)
    assert onnx_runner.translate(stepper, tokenizer, TEXTS, **kw) == expected


def test_runner_command_line(onnx_export, tiny_run, tmp_path, capsys):
    src = tmp_path / "in.txt"
    src.write_text("ein Haus\nzwei\n", encoding="utf-8")
    assert onnx_runner.main([str(onnx_export), "--input", str(src), "--greedy",
                             "--max-len-b", "4"]) == 0  # fmt: skip
    assert len(capsys.readouterr().out.splitlines()) == 2
    assert onnx_runner.main([str(tmp_path), "--input", str(src)]) != 0
    assert "config.json" in capsys.readouterr().err


def test_trained_run_exports_and_decodes(tiny_run, test_lines, tmp_path):
    out = tmp_path / "onnx"
    assert main(["export", "--checkpoint", str(tiny_run), "--to", "onnx", "--out", str(out)]) == 0
    loaded = load_model(tiny_run, "cpu")
    stepper, tokenizer = onnx_runner.load(out, threads=1)
    texts = test_lines[:6]
    kw = dict(beam=1, max_len_b=MAX_LEN_B)
    assert onnx_runner.translate(stepper, tokenizer, texts, **kw) == translate_texts(
        loaded.model, loaded.tokenizer, texts, **kw
    )
    cross_k, _ = stepper.encoder.run(None, {"src_ids": np.array([[5, 6, 2]], dtype=np.int64)})
    assert cross_k.shape[0] == loaded.config.num_decoder_layers


def test_variants_beyond_marian_export_to_onnx(tmp_path):
    """Pre-LN, RMSNorm, SwiGLU, rotary positions and grouped-query attention: the graphs
    run attnkit's own modules, so what Marian cannot express still exports."""
    from interop_helpers import save_random_model

    from attnkit.data.tokenizers import CharTokenizer

    tok = CharTokenizer.train(["the quick brown fox jumps over the lazy dog"])
    ckpt = save_random_model(tmp_path / "ck", tok, norm_position="pre", norm="rmsnorm",
                             activation="swiglu", positions="rotary", num_kv_heads=2)  # fmt: skip
    _exports_as_attnkit_decodes(tmp_path, ckpt)


def test_a_key_size_of_its_own_exports_to_onnx(tmp_path):
    """Table 3 row (B)'s d_k < d_model / h: the graphs pad the keys as the modules do."""
    from interop_helpers import save_random_model

    from attnkit.data.tokenizers import CharTokenizer

    tok = CharTokenizer.train(["the quick brown fox jumps over the lazy dog"])
    _exports_as_attnkit_decodes(tmp_path, save_random_model(tmp_path / "ck", tok, key_dim=3))


def _exports_as_attnkit_decodes(tmp_path, ckpt):
    out = tmp_path / "onnx"
    assert main(["export", "--checkpoint", str(ckpt), "--to", "onnx", "--out", str(out)]) == 0
    loaded = load_model(ckpt, "cpu")
    stepper, tokenizer = onnx_runner.load(out, threads=1)
    texts = ["the fox", "lazy dog jumps", "quick"]
    for beam in (1, 3):
        kw = dict(beam=beam, max_len_b=MAX_LEN_B)
        assert onnx_runner.translate(stepper, tokenizer, texts, **kw) == translate_texts(
            loaded.model, loaded.tokenizer, texts, **kw
        )
