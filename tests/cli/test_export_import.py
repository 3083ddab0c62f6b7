"""attnkit import/export through the real CLI: help, and one-line errors for bad inputs.

Every bad input exits non-zero with exactly one line on stderr naming the
file (or field) and what to do; nothing is unpickled and nothing is written.
"""

from __future__ import annotations

import json
import pickle

import pytest

from attnkit.checkpoints import save_checkpoint
from attnkit.cli.main import main
from attnkit.data.tokenizers import CharTokenizer
from attnkit.models import EncoderDecoder, TransformerConfig


def one_error_line(capsys, code: int) -> str:
    err = capsys.readouterr().err.strip()
    assert code != 0
    assert len(err.splitlines()) == 1, err
    return err


def run_import(source, out) -> int:
    return main(["import", "--from", "hf", str(source), "--out", str(out)])


@pytest.fixture
def gpt2_dir(tmp_path):
    """A tiny random GPT-2 directory (config, safetensors, tokenizer), as transformers saves it."""
    import tokenizers as tk
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    hf_tok = tk.Tokenizer(tk.models.WordLevel({"<|endoftext|>": 0, "a": 1, "b": 2}, "a"))
    hf_tok.pre_tokenizer = tk.pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=hf_tok, eos_token="<|endoftext|>")
    src = tmp_path / "gpt2"
    cfg = GPT2Config(vocab_size=3, n_positions=16, n_embd=8, n_layer=1, n_head=2,
                     bos_token_id=0, eos_token_id=0)  # fmt: skip
    GPT2LMHeadModel(cfg).save_pretrained(src, safe_serialization=True)
    tok.save_pretrained(src)
    return src


def test_help_of_both_commands(capsys):
    for command in ("export", "import"):
        with pytest.raises(SystemExit) as exit_info:
            main([command, "--help"])
        assert exit_info.value.code == 0
        out = capsys.readouterr().out
        assert "--out" in out and "--overwrite" in out


def test_a_directory_that_is_not_a_model(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("hello")
    err = one_error_line(capsys, run_import(tmp_path, tmp_path / "run"))
    assert "config.json" in err and "not a Hugging Face model directory" in err
    assert not (tmp_path / "run").exists()


def test_an_unsupported_model_type(gpt2_dir, tmp_path, capsys):
    config = json.loads((gpt2_dir / "config.json").read_text())
    (gpt2_dir / "config.json").write_text(json.dumps({**config, "model_type": "mamba"}))
    err = one_error_line(capsys, run_import(gpt2_dir, tmp_path / "run"))
    assert (
        "config.json" in err
        and "'mamba'" in err
        and "supported: bert, gpt2, llama, marian, t5" in err
    )


def test_a_shape_mismatch(gpt2_dir, tmp_path, capsys):
    config = json.loads((gpt2_dir / "config.json").read_text())
    (gpt2_dir / "config.json").write_text(json.dumps({**config, "n_embd": 16}))
    err = one_error_line(capsys, run_import(gpt2_dir, tmp_path / "run"))
    assert "model.safetensors" in err and "shape" in err and "config.json" in err


def test_a_missing_tokenizer(gpt2_dir, tmp_path, capsys):
    (gpt2_dir / "tokenizer.json").unlink()
    err = one_error_line(capsys, run_import(gpt2_dir, tmp_path / "run"))
    assert "tokenizer.json: not found" in err and "save_pretrained" in err


class _Payload:
    """Unpickling this runs code: it would create the marker file."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_a_pickle_only_checkpoint_is_never_unpickled(gpt2_dir, tmp_path, capsys):
    (gpt2_dir / "model.safetensors").unlink()
    marker = tmp_path / "PWNED"
    with open(gpt2_dir / "pytorch_model.bin", "wb") as f:
        pickle.dump(_Payload(marker), f)
    err = one_error_line(capsys, run_import(gpt2_dir, tmp_path / "run"))
    assert "pytorch_model.bin" in err and "never loads" in err and "safetensors" in err
    assert not marker.exists()
    with open(gpt2_dir / "pytorch_model.bin", "rb") as f:  # the payload was live
        pickle.load(f)
    assert marker.exists()


def test_a_safetensors_file_that_is_really_a_pickle(gpt2_dir, tmp_path, capsys):
    marker = tmp_path / "PWNED"
    with open(gpt2_dir / "model.safetensors", "wb") as f:
        pickle.dump(_Payload(marker), f)
    err = one_error_line(capsys, run_import(gpt2_dir, tmp_path / "run"))
    assert "model.safetensors" in err and "pickle" in err
    assert not marker.exists()


def test_import_refuses_an_existing_run_unless_overwrite(gpt2_dir, tmp_path, capsys):
    out = tmp_path / "run"
    assert run_import(gpt2_dir, out) == 0
    capsys.readouterr()
    one_error_line(capsys, run_import(gpt2_dir, out))
    assert main(["import", "--from", "hf", str(gpt2_dir), "--out", str(out), "--overwrite"]) == 0


def make_checkpoint(directory, **overrides):
    tok = CharTokenizer.train(["abc def"])
    cfg = TransformerConfig(d_model=16, num_heads=2, d_ff=32, num_encoder_layers=1,
                            num_decoder_layers=1, src_vocab_size=tok.vocab_size,
                            tgt_vocab_size=tok.vocab_size, max_len=32, **overrides)  # fmt: skip
    model = EncoderDecoder(cfg)
    return save_checkpoint(directory, model_state=model.state_dict(),
                           config=cfg.to_dict(), tokenizer_json=tok.to_json())  # fmt: skip


@pytest.mark.parametrize(
    "target,field,value",
    [("hf", "norm_position", "pre"), ("ctranslate2", "norm_position", "pre"),
     ("onnx", "positions", "sinusoidal+relative")],
)  # fmt: skip
def test_export_errors_are_one_line(target, field, value, tmp_path, capsys):
    checkpoint = make_checkpoint(tmp_path / "ck", **{field: value})
    out = tmp_path / "out"
    args = ["export", "--checkpoint", str(checkpoint), "--to", target, "--out", str(out)]
    err = one_error_line(capsys, main(args))
    assert f"{field}:" in err and not out.exists()
    wrong = "--quantization" if target != "ctranslate2" else "--metrics"
    err = one_error_line(capsys, main([*args, wrong, "int8"]))
    assert wrong in err
    out.mkdir()
    (out / "keep.txt").write_text("x")
    err = one_error_line(capsys, main(args))
    assert "--overwrite" in err and (out / "keep.txt").exists()
