"""``attnkit export --to gguf``: a Llama-type decoder as a llama.cpp GGUF file, and back.

Every check goes through the real CLI (``export --to gguf``, then ``import --from
gguf``) on a tiny random Llama-type ``DecoderOnlyLM`` (grouped-query heads, tied
and untied output, a byte-level BPE tokenizer with a chat template):

* round trip: f32 logits within 1e-6 (the RMS epsilon is stored as float32);
  f16, q8_0 and q4_0 weights within their types' rounding error and logits
  within a few times it; q8_0 gives the same 20 greedy tokens;
* the file read back with ``gguf.GGUFReader`` (independent of attnkit's reader):
  ``llama.*`` metadata, tokenizer keys, tensor names, types and shapes, and the
  q/k rows in llama.cpp's RoPE order by ``gguf_helpers.llama_cpp_permute``
  (llama.cpp's converter formula); a crafted llama.cpp-style file imported and
  exported again gives its own tensors and vocabulary back;
* the tokenizer's ids on 200 varied strings survive the round trip;
* models GGUF's ``llama`` cannot express are one line, exit 2, nothing written.

llama.cpp itself runs the exports in ``test_engines_llama.py`` (``generate
--engine llama.cpp``, llama-cpp-python).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from gguf_helpers import (
    D_FF,
    HEADS,
    KV_HEADS,
    LAYERS,
    TEMPLATE,
    D,
    hf_weights,
    llama_cpp_permute,
    metadata,
    save_llama,
    tiny_tokenizer,
    to_gguf,
    varied_strings,
    write_gguf,
)
from interop_helpers import save_random_model

from attnkit.checkpoints import load_model
from attnkit.cli.main import main
from attnkit.data.tokenizers import CharTokenizer
from attnkit.decoding.generate import generate

gguf = pytest.importorskip("gguf")


def export(ckpt: Path, out: Path, *extra: str) -> int:
    return main(["export", "--checkpoint", str(ckpt), "--to", "gguf", "--out", str(out), *extra])


def round_trip(tmp_path: Path, ckpt: Path, precision: str) -> tuple[Path, Path]:
    """Export ``ckpt`` at ``precision`` and import the file; returns (file, run)."""
    out = tmp_path / f"model_{precision}.gguf"
    assert export(ckpt, out, "--precision", precision) == 0
    back = tmp_path / f"back_{precision}"
    assert main(["import", "--from", "gguf", str(out), "--out", str(back)]) == 0
    return out, back


@pytest.fixture(scope="module")
def untied(tmp_path_factory) -> Path:
    return save_llama(tmp_path_factory.mktemp("llama") / "ckpt", tiny_tokenizer(),
                      tie_embeddings=False)  # fmt: skip


IDS = torch.tensor([[5, 40, 77, 120, 3, 250, 9, 61, 88, 14, 200, 31]])


def logits(run: Path) -> torch.Tensor:
    with torch.no_grad():
        return load_model(run, "cpu").model(IDS).logits


# -- round trips ------------------------------------------------------------------------


@pytest.mark.parametrize("tied", [False, True])
def test_f32_round_trip_gives_the_same_model(tmp_path, untied, tied):
    ckpt = save_llama(tmp_path / "tied", tiny_tokenizer()) if tied else untied
    _, back = round_trip(tmp_path, ckpt, "f32")
    ours, theirs = load_model(ckpt, "cpu"), load_model(back, "cpu")
    # The RMS epsilon travels as float32 (llama.cpp reads an f32): 1e-5 -> 9.99999975e-06.
    assert theirs.config == ours.config.replace(norm_eps=theirs.config.norm_eps)
    assert theirs.config.norm_eps == pytest.approx(1e-5, rel=1e-7)
    assert (theirs.model.lm_head.weight is theirs.model.embed.tokens.weight) is tied
    state, back_state = ours.model.state_dict(), theirs.model.state_dict()
    assert all(torch.equal(state[k], back_state[k]) for k in state)
    torch.testing.assert_close(logits(back), logits(ckpt), rtol=0, atol=1e-6)


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm()).item()


def test_quantized_round_trips_stay_close(tmp_path, untied):
    """Each weight within its type's rounding error (f16: 11-bit mantissa; q8_0/q4_0: one
    scale per 32 weights, 8 and 4 bits), and the logits within a few times that."""
    state, reference = load_model(untied, "cpu").model.state_dict(), logits(untied)
    weights, outputs = {}, {}
    for precision in ("f16", "q8_0", "q4_0"):
        _, back = round_trip(tmp_path, untied, precision)
        got = load_model(back, "cpu").model.state_dict()
        weights[precision] = max(relative(got[k], state[k]) for k in state)
        outputs[precision] = relative(logits(back), reference)
    print(f"relative error: worst weight {weights}, logits {outputs}")
    assert weights["f16"] < 5e-4 and outputs["f16"] < 3e-3
    assert weights["q8_0"] < 1e-2 and outputs["q8_0"] < 6e-2
    assert weights["q4_0"] < 0.15 and outputs["q4_0"] < 1.0
    assert outputs["f16"] < outputs["q8_0"] < outputs["q4_0"]


def test_q8_0_greedy_tokens_equal_f32(tmp_path, untied):
    _, back = round_trip(tmp_path, untied, "q8_0")
    prompt = torch.tensor([tiny_tokenizer().encode("the lazy dog")])
    ours = generate(load_model(untied, "cpu").model, prompt, 20, temperature=0.0)
    theirs = generate(load_model(back, "cpu").model, prompt, 20, temperature=0.0)
    assert theirs.tolist() == ours.tolist()


def test_tokenizer_round_trip_same_ids(tmp_path, untied):
    _, back = round_trip(tmp_path, untied, "f16")
    ours, theirs = load_model(untied, "cpu").tokenizer, load_model(back, "cpu").tokenizer
    for s in [*varied_strings(), "<|im_start|>hi<|im_end|>", "the quick brown fox"]:
        assert theirs.encode(s) == ours.encode(s), s
        assert theirs.decode(ours.encode(s)) == ours.decode(ours.encode(s)), s
    assert (theirs.pad_id, theirs.bos_id, theirs.eos_id) == (0, 1, 2)
    assert theirs.chat_template == TEMPLATE


# -- the file as llama.cpp reads it -----------------------------------------------------


def field(reader, key: str):
    f = reader.fields[key]
    if f.types[0] == gguf.GGUFValueType.ARRAY:
        if f.types[-1] == gguf.GGUFValueType.STRING:
            return [bytes(f.parts[i]).decode() for i in f.data]
        return [f.parts[i][0].item() for i in f.data]
    if f.types[0] == gguf.GGUFValueType.STRING:
        return bytes(f.parts[f.data[0]]).decode()
    return f.parts[f.data[0]][0].item()


@pytest.mark.parametrize("precision", ["f32", "q8_0"])
def test_metadata_and_tensors_read_back_with_gguf_reader(tmp_path, untied, precision):
    out = tmp_path / "m.gguf"
    assert export(untied, out, "--precision", precision) == 0
    reader = gguf.GGUFReader(out)
    tokenizer = tiny_tokenizer()
    expected = {
        "general.architecture": "llama", "general.name": "ckpt", "llama.context_length": 64,
        "llama.embedding_length": D, "llama.block_count": LAYERS,
        "llama.feed_forward_length": D_FF, "llama.attention.head_count": HEADS,
        "llama.attention.head_count_kv": KV_HEADS, "llama.rope.dimension_count": D // HEADS,
        "llama.rope.freq_base": 10000.0, "llama.vocab_size": tokenizer.vocab_size,
        "general.file_type": {"f32": 0, "q8_0": 7}[precision],
        "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt-2",
        "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2,
        "tokenizer.ggml.padding_token_id": 0, "tokenizer.ggml.add_bos_token": False,
        "tokenizer.chat_template": TEMPLATE,
    }  # fmt: skip
    assert {k: field(reader, k) for k in expected} == expected
    assert field(reader, "llama.attention.layer_norm_rms_epsilon") == pytest.approx(1e-5)
    tokens = field(reader, "tokenizer.ggml.tokens")
    assert tokens[:3] == ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    assert field(reader, "tokenizer.ggml.token_type")[:4] == [3, 3, 3, 1]
    assert len(field(reader, "tokenizer.ggml.merges")) > 0

    tensors = {t.name: t for t in reader.tensors}
    assert len(tensors) == 3 + 9 * LAYERS
    matrix = "F32" if precision == "f32" else "Q8_0"
    assert tensors["blk.0.attn_norm.weight"].tensor_type.name == "F32"
    assert tensors["output.weight"].tensor_type.name == matrix
    assert tensors["blk.1.ffn_down.weight"].tensor_type.name == matrix
    assert [int(n) for n in tensors["blk.0.attn_k.weight"].shape] == [D, KV_HEADS * D // HEADS]
    if precision == "f32":  # q and k rows in llama.cpp's RoPE order, by its converter's formula
        state = load_model(untied, "cpu").model.state_dict()
        qkv = state["layers.1.self_attn.qkv_proj.weight"]
        q, k, v = qkv.split([D, KV_HEADS * D // HEADS, KV_HEADS * D // HEADS])
        for name, hf, heads in (("attn_q", q, HEADS), ("attn_k", k, KV_HEADS), ("attn_v", v, 0)):
            want = llama_cpp_permute(hf, heads) if heads else hf
            got = torch.from_numpy(tensors[f"blk.1.{name}.weight"].data.copy())
            assert torch.equal(got, want), name


def test_rows_past_the_tokenizer_are_named_as_llama_cpp_does(tmp_path):
    tokenizer = tiny_tokenizer()
    ckpt = save_llama(tmp_path / "ckpt", tokenizer, vocab_size=tokenizer.vocab_size + 3)
    out, back = round_trip(tmp_path, ckpt, "f32")
    reader = gguf.GGUFReader(out)
    size = tokenizer.vocab_size
    assert field(reader, "tokenizer.ggml.tokens")[size - 1 :] == [
        tokenizer.id_to_token(size - 1), f"[PAD{size}]", f"[PAD{size + 1}]", f"[PAD{size + 2}]"
    ]  # fmt: skip
    assert field(reader, "tokenizer.ggml.token_type")[size:] == [5, 5, 5]
    torch.testing.assert_close(logits(back), logits(ckpt), rtol=0, atol=1e-6)
    assert load_model(back, "cpu").tokenizer.encode("the dog") == tokenizer.encode("the dog")


def test_a_llama_cpp_file_comes_back_as_it_was(tmp_path):
    """A crafted file in llama.cpp's layout, imported and exported: the same tensors,
    vocabulary, merges, token types and pre-tokenizer."""
    source = write_gguf(tmp_path / "tiny.gguf", to_gguf(hf_weights()), metadata())
    assert main(["import", "--from", "gguf", str(source), "--out", str(tmp_path / "run")]) == 0
    out = tmp_path / "again.gguf"
    assert export(tmp_path / "run", out) == 0
    a, b = gguf.GGUFReader(source), gguf.GGUFReader(out)
    for key in (
        "tokenizer.ggml.tokens",
        "tokenizer.ggml.merges",
        "tokenizer.ggml.token_type",
        "tokenizer.ggml.pre",
        "tokenizer.ggml.bos_token_id",
        "tokenizer.chat_template",
    ):
        assert field(b, key) == field(a, key), key  # fmt: skip
    theirs = {t.name: t.data for t in a.tensors}
    ours = {t.name: t.data for t in b.tensors}
    assert ours.keys() == theirs.keys()
    assert all((ours[k] == theirs[k]).all() for k in theirs)


# -- refusals ---------------------------------------------------------------------------


def refused(capsys, ckpt: Path, out: Path, *extra: str) -> str:
    rc = export(ckpt, out, *extra)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert err.count("\n") == 1 and err.startswith("attnkit export: error: "), err
    assert not out.exists()
    return err


@pytest.mark.parametrize(
    ("change", "named"),
    [({"positions": "learned"}, "positions: 'learned'"), ({"norm": "layernorm"}, "norm: "),
     ({"activation": "gelu"}, "activation: 'gelu'"), ({"bias": True}, "bias: True")],
)  # fmt: skip
def test_a_config_llama_cannot_express_is_one_line(tmp_path, capsys, change, named):
    ckpt = save_llama(tmp_path / "ckpt", tiny_tokenizer(), **change)
    err = refused(capsys, ckpt, tmp_path / "m.gguf")
    assert named in err and "not expressible in GGUF's llama architecture" in err


def test_a_tokenizer_llama_cpp_cannot_reproduce_is_one_line(tmp_path, capsys):
    ckpt = save_llama(tmp_path / "ckpt", CharTokenizer.train(["abc def"]))
    err = refused(capsys, ckpt, tmp_path / "m.gguf")
    assert "tokenizer: kind 'char' has no llama.cpp tokenizer model" in err


def test_an_encoder_decoder_is_one_line(tmp_path, capsys):
    ckpt = save_random_model(tmp_path / "ckpt", CharTokenizer.train(["abc def"]))
    err = refused(capsys, ckpt, tmp_path / "m.gguf")
    assert "family: 'transformer'; --to gguf exports decoder-only models" in err


def test_an_existing_file_is_kept_without_overwrite(tmp_path, capsys, untied):
    out = tmp_path / "m.gguf"
    out.write_text("earlier")
    assert export(untied, out) == 2
    assert "--overwrite" in capsys.readouterr().err and out.read_text() == "earlier"
    assert export(untied, out, "--overwrite") == 0
    assert out.read_bytes()[:4] == b"GGUF"
    assert [p.name for p in tmp_path.iterdir()] == ["m.gguf"]  # no temporary left


def test_precision_is_a_gguf_option(tmp_path, capsys, untied):
    rc = main(["export", "--checkpoint", str(untied), "--to", "hf", "--out",
               str(tmp_path / "hf"), "--precision", "f16"])  # fmt: skip
    assert rc == 2 and "--precision: only --to gguf" in capsys.readouterr().err


# -- SmolLM2 ----------------------------------------------------------------------------


@pytest.mark.slow
def test_smollm2_f32_export_reimports_to_the_same_logits(smollm2_run, tmp_path):
    out, back = round_trip(tmp_path, smollm2_run, "f32")
    ours, theirs = load_model(smollm2_run, "cpu"), load_model(back, "cpu")
    assert theirs.config == ours.config
    prompt = "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
    ids = torch.tensor([ours.tokenizer.encode(prompt)])
    assert theirs.tokenizer.encode(prompt) == ids[0].tolist()
    with torch.no_grad():
        torch.testing.assert_close(theirs.model(ids).logits, ours.model(ids).logits,
                                   rtol=0, atol=0)  # fmt: skip
