"""``bench/bandwidth.py``: the bytes a decode step reads, and the read-bandwidth probe."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import bandwidth  # noqa: E402  (bench/ is not a package)

from attnkit.models.decoder_only import DecoderOnlyLM  # noqa: E402
from attnkit.models.lm_config import DecoderOnlyConfig  # noqa: E402
from attnkit.positions.learned import LearnedPositions  # noqa: E402
from attnkit.quantize import quantize_model  # noqa: E402


def tiny(tied: bool, **fields: object) -> DecoderOnlyLM:
    torch.manual_seed(0)
    config = DecoderOnlyConfig.from_preset(
        "small", vocab_size=512, d_model=64, num_heads=4, num_layers=2, d_ff=128, max_len=32,
        tie_embeddings=tied, **fields,
    )  # fmt: skip
    return DecoderOnlyLM(config).eval()


def test_weights_read_leave_out_the_lookup_table_unless_it_is_the_output_matrix():
    for tied in (True, False):
        model = tiny(tied)
        every = sum(p.numel() * p.element_size() for p in model.parameters())  # tied: once
        table = model.embed.tokens.weight.numel() * 4
        positions = sum(
            p.numel() * 4 for m in model.modules() if isinstance(m, LearnedPositions)
            for p in m.parameters()
        )  # fmt: skip
        assert positions > 0
        expected = every - (0 if tied else table) - positions
        assert bandwidth.weight_bytes_read(model) == expected
    # rotary positions: their cos/sin tables are read a row a step, like an embedding's
    rotary = tiny(True, positions="rotary")
    every = sum(p.numel() * p.element_size() for p in rotary.parameters())
    assert bandwidth.weight_bytes_read(rotary) == every


def test_int8_weights_are_counted_at_their_packed_width():
    model = tiny(True)
    fp32 = bandwidth.weight_bytes_read(model)
    int8 = bandwidth.weight_bytes_read(quantize_model(model, "int8"))
    assert fp32 / 4.5 < int8 < fp32 / 3  # int8 linears, fp32 scales, norms and biases


def test_kv_bytes_and_the_probe():
    config = tiny(True).config
    per_position = 2 * config.num_layers * config.kv_heads * config.head_dim * 4
    assert bandwidth.kv_bytes_per_position(config, 4) == per_position
    assert bandwidth.read_bandwidth(gib=1 / 256, threads=1, repeats=2) > 0.1  # GB/s
    best, median = bandwidth.numpy_read(gib=1 / 256, threads=2, repeats=2)
    assert best >= median > 0
