"""The one key-mapping mechanism: tables read both ways, and every check before any read."""

from __future__ import annotations

import pytest
import torch
from gguf_helpers import D_FF, HEADS, KV_HEADS, LAYERS, VOCAB, D, hf_weights, to_gguf

from attnkit.errors import CheckpointError
from attnkit.interop.gguf.read import GGUF_FIELDS, GGUF_LLAMA_KEYS
from attnkit.interop.keymap import plan_load, save_state
from attnkit.interop.keytable import TRANSPOSE, Dims, Rule, Table, fuse, split_rows, stack_rows
from attnkit.interop.llama import LLAMA_KEYS, LlamaHParams, llama_dims
from attnkit.models import DecoderOnlyConfig, DecoderOnlyLM
from attnkit.models.presets import LLAMA_OPTIONS

TABLE = Table(
    "a test model",
    (
        Rule("embed.weight", "tok.weight", "V D", aliases=("shared.weight",)),
        fuse("layers.{i}.qkv.{wb}", "blk.{i}.*.{wb}", "qkv", ("D D", "KV D", "KV D")),
        Rule("layers.{i}.ffn.weight", "blk.{i}.ffn.weight", "D F", (TRANSPOSE,)),
        # several of ours in one of theirs (cross-attention's q_proj + kv_proj -> in_proj)
        Rule(("layers.{i}.q.weight", "layers.{i}.kv.weight"), "blk.{i}.in_proj.weight",
             "D+2*KV D", rows=("D", "2*KV")),
        Rule("head.weight", "head.weight", "V D"),
    ),
    ignore=("blk.{i}.buffer",),
    prefix="model.",
)  # fmt: skip
DIMS = Dims({"D": 4, "KV": 2, "F": 3, "V": 5, "i": 2}, {"i": "num_layers", "F": "ffn"}, "cfg")


def our_state(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    state = {"embed.weight": torch.randn(5, 4, generator=g)}
    for i in range(2):
        state |= {
            f"layers.{i}.qkv.weight": torch.randn(8, 4, generator=g),
            f"layers.{i}.qkv.bias": torch.randn(8, generator=g),
            f"layers.{i}.ffn.weight": torch.randn(3, 4, generator=g),
            f"layers.{i}.q.weight": torch.randn(4, 4, generator=g),
            f"layers.{i}.kv.weight": torch.randn(4, 4, generator=g),
        }
    state["head.weight"] = state["embed.weight"]
    return state


def load(table: Table, theirs: dict[str, torch.Tensor], dims: Dims = DIMS):
    plan = plan_load(table, {k: tuple(v.shape) for k, v in theirs.items()}, dims, "f.bin")
    return plan.load(dict(theirs).pop)[0]


def test_a_table_reads_both_ways():
    ours = our_state()
    theirs = save_state(TABLE, ours, DIMS)
    assert torch.equal(theirs["blk.1.k.weight"], ours["layers.1.qkv.weight"][4:6])
    assert torch.equal(theirs["blk.0.v.bias"], ours["layers.0.qkv.bias"][6:])
    assert torch.equal(theirs["blk.0.ffn.weight"], ours["layers.0.ffn.weight"].t())
    in_proj = torch.cat([ours["layers.1.q.weight"], ours["layers.1.kv.weight"]])
    assert torch.equal(theirs["blk.1.in_proj.weight"], in_proj)
    back = load(
        TABLE, {"model." + k: v for k, v in theirs.items()} | {"blk.0.buffer": ours["head.weight"]}
    )
    assert back.keys() == ours.keys()
    assert all(torch.equal(back[k], ours[k]) for k in ours)


def test_aliases_ties_and_without():
    ours = our_state()
    theirs = save_state(TABLE, ours, DIMS, expected={"shared.weight"})
    assert theirs["shared.weight"] is theirs["tok.weight"]
    del theirs["tok.weight"]  # the alias stands in
    tied = TABLE.tie({"head.weight": "embed.weight"})
    back = load(tied, theirs)  # head.weight in the file is skipped, the tensor shared
    assert back["head.weight"] is back["embed.weight"]
    assert "head.weight" not in {
        k for r in TABLE.without(["head.weight"]).rules for k in r.our_keys
    }


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda t: t.update({"blk.0.extra": torch.zeros(1)}), "tensor blk.0.extra: has no place"),
        (lambda t: t.pop("blk.1.k.weight"), "tensor blk.1.k.weight: missing"),
        (lambda t: t.update({"blk.0.ffn.weight": torch.zeros(3, 4)}),
         r"tensor blk.0.ffn.weight: shape \(3, 4\), expected \(4, 3\) from cfg \(D, ffn\)"),
        (lambda t: t.update({"blk.7.ffn.weight": torch.zeros(4, 3)}),
         r"num_layers is 2 in cfg, but the file holds the tensors of 3 \(indices 0..7\)"),
        (lambda t: t["blk.0.q.bias"].__setitem__(1, torch.nan),
         "tensor blk.0.q.bias: 1 of 4 values are NaN or infinite"),
    ],
)  # fmt: skip
def test_every_check_names_the_file_and_the_tensor(change, message):
    theirs = save_state(TABLE, our_state(), DIMS)
    change(theirs)
    with pytest.raises(CheckpointError, match=f"^f.bin: {message}"):
        load(TABLE, theirs)


def test_a_huge_layer_count_is_refused_without_iterating_it():
    theirs = save_state(TABLE, our_state(), DIMS)
    dims = Dims({**DIMS.values, "i": 2**62}, DIMS.fields, "cfg")
    shapes = {k: tuple(v.shape) for k, v in theirs.items()}
    with pytest.raises(CheckpointError, match="num_layers is 4611686018427387904 in cfg"):
        plan_load(TABLE, shapes, dims, "f.bin")


def test_a_one_way_join_is_not_written_back():
    from attnkit.interop.keytable import Join, Rule

    fold = Join("token-type row 0 added", lambda p: p[0] + p[1][0])
    rule = Rule("embed.positions.weight", ("pos.weight", "types.weight"), ("P D", "T D"), join=fold)
    table = Table("BERT", (rule,))
    state = {"embed.positions.weight": torch.zeros(8, 4)}
    with pytest.raises(CheckpointError, match="token-type row 0 added cannot be written back"):
        save_state(table, state, Dims({"P": 8, "T": 2, "D": 4}))


def test_stack_and_split_rows():
    parts = [torch.randn(4, 2), torch.randn(1, 2)]
    assert all(torch.equal(a, b) for a, b in zip(split_rows(stack_rows(parts), [4, 1]), parts))
    with pytest.raises(CheckpointError, match="5 rows do not split"):
        split_rows(stack_rows(parts), [3, 3])


# -- the Llama tables, both ways (a GGUF export will run them backwards) ---------------


def test_gguf_table_writes_what_llama_cpp_writes():
    """HF Llama weights -> GGUF names and RoPE row order, against gguf_helpers' own
    permutation (llama.cpp's converter formula), and back."""
    weights = hf_weights()
    hp = LlamaHParams(LAYERS, D, HEADS, KV_HEADS, D_FF, VOCAB, 128, 1e4, 1e-5, True)
    dims = llama_dims(hp, GGUF_FIELDS, "meta")
    table = GGUF_LLAMA_KEYS.without(["lm_head.weight"])
    written = save_state(table, weights, dims)
    expected = {k: torch.from_numpy(v) for k, v in to_gguf(weights).items()}
    assert written.keys() == expected.keys()
    assert all(torch.equal(written[k], expected[k]) for k in expected)
    back = load(table, written, dims)
    assert all(torch.equal(back[k], weights[k]) for k in weights)


def test_llama_table_round_trips_an_attnkit_model():
    config = DecoderOnlyConfig.from_dict({**LLAMA_OPTIONS, "d_model": 32, "num_heads": 4,
                                          "num_kv_heads": 2, "d_ff": 48, "num_layers": 2,
                                          "vocab_size": 50, "tie_embeddings": False})  # fmt: skip
    state = DecoderOnlyLM(config).state_dict()
    hp = LlamaHParams(2, 32, 4, 2, 48, 50, 64, 1e4, 1e-5, False)
    hf = save_state(LLAMA_KEYS, state, llama_dims(hp))
    assert hf["model.layers.1.self_attn.k_proj.weight"].shape == (16, 32)
    back = load(LLAMA_KEYS, hf, llama_dims(hp))
    assert back.keys() == state.keys() and all(torch.equal(back[k], state[k]) for k in state)
