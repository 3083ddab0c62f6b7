"""GGUF reading on small crafted files: names, q/k permutation, types, and one-line errors.

The files are written with the ``gguf`` package's own writer from random
Hugging Face-layout Llama weights (``gguf_helpers``), so every check has an
independent expected value and needs no download.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from gguf_helpers import (
    HEAD_DIM,
    HEADS,
    KV_HEADS,
    TOKENS,
    VOCAB,
    D,
    hf_weights,
    llama_cpp_permute,
    metadata,
    to_gguf,
    write_gguf,
)

from attnkit.errors import CheckpointError
from attnkit.interop.gguf.read import read_gguf, unpermute_rope_rows
from attnkit.positions.rotary import RotaryEmbedding, apply_rotary

gguf = pytest.importorskip("gguf")


@pytest.fixture
def tiny(tmp_path) -> tuple[Path, dict[str, torch.Tensor]]:
    weights = hf_weights()
    return write_gguf(tmp_path / "tiny.gguf", to_gguf(weights), metadata()), weights


def test_f32_file_gives_back_the_hf_weights_exactly(tiny):
    path, weights = tiny
    ckpt = read_gguf(path)
    assert ckpt.tensors.keys() == weights.keys()
    for name, w in weights.items():
        assert torch.equal(ckpt.tensors[name], w), name
    hp = ckpt.hparams
    assert (hp.num_layers, hp.d_model, hp.num_heads, hp.num_kv_heads, hp.d_ff) == (2, 64, 4, 2, 96)
    assert hp.vocab_size == VOCAB and hp.tie_embeddings and hp.rope_theta == 100000.0
    assert ckpt.special_ids == {"bos_id": 1, "eos_id": 0} and ckpt.chat_template == "{{x}}"


@pytest.mark.parametrize("quant", ["Q8_0", "Q4_1", "Q4_0", "Q5_0", "Q5_1", "F16", "BF16"])
def test_quantized_files_dequantize_as_gguf_does(tmp_path, quant):
    weights = hf_weights()
    arrays = to_gguf(weights)
    path = write_gguf(tmp_path / f"{quant}.gguf", arrays, metadata(), quant=quant)
    ckpt = read_gguf(path, tokenizer=False)
    qtype = gguf.GGMLQuantizationType[quant]
    q = arrays["blk.1.attn_k.weight"]
    expected = gguf.quants.dequantize(gguf.quants.quantize(q, qtype), qtype)
    expected = unpermute_rope_rows(torch.from_numpy(expected.astype(np.float32)), KV_HEADS)
    assert torch.equal(ckpt.tensors["model.layers.1.self_attn.k_proj.weight"], expected)
    assert ckpt.tensor_types["model.layers.1.mlp.up_proj.weight"] == quant
    for name, w in weights.items():  # and every tensor is the right one, up to rounding
        # ~0.1 relative error for 4-bit blocks; a wrong tensor or row order gives ~1.4.
        assert (ckpt.tensors[name] - w).norm() < 0.2 * w.norm(), name


def test_unpermute_turns_interleaved_rope_into_rotate_half():
    # llama.cpp rotates pairs (2i, 2i+1) of the GGUF rows; HF rotates pairs
    # (i, i + d/2) of its rows. With W_gguf = permute(W_hf), both rotate the same
    # pairs by the same angles: unpermuting the rotated GGUF query gives HF's.
    w_hf = torch.randn(HEADS * HEAD_DIM, D, dtype=torch.float64)
    w_gguf = llama_cpp_permute(w_hf, HEADS)
    assert torch.equal(unpermute_rope_rows(w_gguf, HEADS), w_hf)
    x, m = torch.randn(D, dtype=torch.float64), 7
    freq = 100000.0 ** (-2 * torch.arange(HEAD_DIM // 2, dtype=torch.float64) / HEAD_DIM)
    q = (w_gguf @ x).view(HEADS, HEAD_DIM // 2, 2)
    z = torch.view_as_complex(q.contiguous()) * torch.polar(torch.ones_like(freq), m * freq)
    rotated_gguf = torch.view_as_real(z).reshape(-1)
    rope = RotaryEmbedding(HEAD_DIM, 100000.0, max_len=16, dtype=torch.float64)
    q_hf = (w_hf @ x).view(1, HEADS, 1, HEAD_DIM)
    rotated_hf, _ = apply_rotary(q_hf, q_hf, *rope(torch.tensor([m])))
    torch.testing.assert_close(
        unpermute_rope_rows(rotated_gguf[:, None], HEADS)[:, 0],
        rotated_hf.reshape(-1),
        rtol=0,
        atol=1e-12,
    )


def test_tokenizer_from_metadata(tiny):
    path, _ = tiny
    tok = read_gguf(path, tensors=False).tokenizer
    enc = tok.encode("<|im_start|>hello world")
    assert enc.tokens == ["<|im_start|>", "he", "llo", "Ġw", "o", "r", "l", "d"]
    assert tok.decode(enc.ids, skip_special_tokens=False) == "<|im_start|>hello world"
    assert tok.decode(enc.ids) == "hello world"  # control tokens are special


def test_add_bos_token_adds_bos(tmp_path):
    meta = metadata(tokenizer__ggml__add_bos_token=("bool", True))
    path = write_gguf(tmp_path / "bos.gguf", to_gguf(hf_weights()), meta)
    tok = read_gguf(path, tensors=False).tokenizer
    assert tok.encode("he").ids == [1, TOKENS.index("he")]
    assert tok.encode("he", add_special_tokens=False).ids == [TOKENS.index("he")]


# -- errors: one line, naming the file and the field ------------------------------------


def _error(path: Path, match: str, **kwargs) -> str:
    with pytest.raises(CheckpointError, match=match) as info:
        read_gguf(path, **kwargs)
    message = str(info.value)
    assert str(path) in message and "\n" not in message, message
    return message


def test_missing_empty_and_foreign_files(tmp_path):
    _error(tmp_path / "nope.gguf", "no such file")
    (tmp_path / "empty.gguf").write_bytes(b"")
    _error(tmp_path / "empty.gguf", "not a GGUF file")
    (tmp_path / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ")
    _error(tmp_path / "model.safetensors", "not a GGUF file")


def test_truncated_files(tiny, tmp_path):
    path, _ = tiny
    data = path.read_bytes()
    for cut in (6, 40, 300, len(data) // 2, len(data) - 1):
        short = tmp_path / f"cut{cut}.gguf"
        short.write_bytes(data[:cut])
        _error(short, "truncated")


def test_unsupported_architecture(tmp_path):
    path = write_gguf(tmp_path / "q.gguf", {}, {}, arch="qwen2")
    assert "'qwen2' is not supported" in _error(path, "general.architecture")


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ({"llama__block_count": None}, "llama.block_count"),
        ({"llama__attention__head_count_kv": ("u32", 3)}, "llama.attention.head_count_kv"),
        ({"llama__attention__head_count": ("u32", 3)}, "llama.attention.head_count"),
        ({"llama__feed_forward_length": ("str", "96")}, "llama.feed_forward_length"),
        ({"llama__rope__dimension_count": ("u32", 8)}, "llama.rope.dimension_count"),
        ({"llama__rope__scaling__type": ("str", "yarn")}, "llama.rope.scaling.type"),
        ({"llama__expert_count": ("u32", 8)}, "llama.expert_count"),
        ({"tokenizer__ggml__model": ("str", "llama")}, "tokenizer.ggml.model"),
        ({"tokenizer__ggml__pre": ("str", "qwen2")}, "tokenizer.ggml.pre"),
        ({"tokenizer__ggml__eos_token_id": ("u32", 9999)}, "tokenizer.ggml.eos_token_id"),
        ({"tokenizer__ggml__merges": ("arr", ["h e", "x y"])}, r"tokenizer.ggml.merges\[1\]"),
    ],
)
def test_bad_metadata_names_the_field(tmp_path, override, field):
    path = write_gguf(tmp_path / "bad.gguf", to_gguf(hf_weights()), metadata(**override))
    _error(path, f": {field}: ")


def test_tokenizer_errors_can_be_skipped_or_overridden(tmp_path):
    meta = metadata(tokenizer__ggml__pre=("str", "qwen2"))
    path = write_gguf(tmp_path / "pre.gguf", to_gguf(hf_weights()), meta)
    assert read_gguf(path, tokenizer=False).tokenizer is None
    assert read_gguf(path, tensors=False, pre_tokenizer="gpt2").tokenizer is not None


def test_gpt2_regex_reads_under_both_spellings(tmp_path):
    """llama.cpp's files say "gpt-2"; attnkit's export said "gpt2" before round 13."""
    arrays = to_gguf(hf_weights())
    read = [read_gguf(write_gguf(tmp_path / f"{name}.gguf", arrays,
                                 metadata(tokenizer__ggml__pre=("str", name))),
                      tensors=False).tokenizer
            for name in ("gpt-2", "gpt2")]  # fmt: skip
    ids = [tokenizer.encode("he said 12 things").ids for tokenizer in read]
    assert ids[0] == ids[1] and len(ids[0]) > 1


def test_unsupported_tensor_type_names_tensor_and_type(tmp_path):
    arrays = to_gguf(hf_weights())
    arrays["blk.0.ffn_norm.weight"] = np.zeros(D, dtype=np.int32)
    path = write_gguf(tmp_path / "i32.gguf", arrays, metadata())
    assert "ggml type I32 is not supported" in _error(path, "tensor blk.0.ffn_norm.weight")


def test_extra_missing_and_misshapen_tensors(tmp_path):
    arrays = to_gguf(hf_weights())
    extra = dict(arrays, **{"rope_freqs.weight": np.ones(HEAD_DIM // 2, dtype=np.float32)})
    _error(write_gguf(tmp_path / "extra.gguf", extra, metadata()), "tensor rope_freqs.weight")
    missing = {k: v for k, v in arrays.items() if k != "blk.1.ffn_up.weight"}
    _error(write_gguf(tmp_path / "missing.gguf", missing, metadata()), "ffn_up|up_proj")
    wrong = dict(arrays, **{"blk.0.attn_v.weight": np.zeros((D, D), dtype=np.float32)})
    wrong_path = write_gguf(tmp_path / "wrong.gguf", wrong, metadata())
    _error(wrong_path, r"attn_v.weight: shape \(64, 64\), expected \(32, 64\)")


def test_corrupt_array_count_is_caught_before_the_reader(tiny, tmp_path):
    # gguf's reader trusts counts: an array of 2^40 token types would have it
    # build a 2^40-element index list. The header walk refuses it first.
    path, _ = tiny
    data = bytearray(path.read_bytes())
    key = b"tokenizer.ggml.token_type"
    count_at = data.index(key) + len(key) + 4 + 4  # value type u32, element type u32
    data[count_at : count_at + 8] = (1 << 40).to_bytes(8, "little")
    bad = tmp_path / "count.gguf"
    bad.write_bytes(bytes(data))
    _error(bad, "array of 1099511627776 elements")


def test_random_header_corruption_is_one_error_or_a_valid_read(tiny, tmp_path):
    path, _ = tiny
    data = path.read_bytes()
    header_end = data.index(b"blk.1.ffn_down.weight") + 64  # the tensor table's tail
    rng = np.random.default_rng(0)
    bad = tmp_path / "flipped.gguf"
    for _ in range(60):
        flipped = bytearray(data)
        for at in rng.integers(4, header_end, size=2):
            flipped[at] = int(rng.integers(256))
        bad.write_bytes(bytes(flipped))
        try:
            read_gguf(bad)
        except CheckpointError as e:
            assert str(bad) in str(e) and "\n" not in str(e)
