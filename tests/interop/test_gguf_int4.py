"""``import --from gguf --keep-quantized``: Q4_0/Q4_1/Q8_0 blocks kept as linears, exactly.

On tiny crafted files (``gguf_helpers.write_gguf``, quantized by the ``gguf``
package's own quantizer): the blocks come back byte for byte through
``export --to gguf``, a float load equals the plain import bit for bit, the
int4 kernel's logits stay within ``INT4_LOGIT_ERROR`` of it, and what cannot
be kept is dequantized with a note.
"""

from __future__ import annotations

import json
import struct

import gguf
import numpy as np
import pytest
import torch
from gguf_helpers import LAYERS, hf_weights, metadata, to_gguf, write_gguf

from attnkit.checkpoints import load_model
from attnkit.checkpoints.int4_weights import INT4_FILE
from attnkit.cli.main import main
from attnkit.errors import CheckpointError
from attnkit.inference import CheckpointInfo, Machine, Options, make_plan
from attnkit.inference.prepare import convert
from attnkit.interop.gguf.blocks import (
    codes,
    dequantize_record,
    int8_codes,
    make_q8_record,
    make_record,
    to_blocks,
    to_record,
)
from attnkit.interop.gguf.importer import import_gguf
from attnkit.quantize import Int4Linear, Int8BlockLinear, float_linears

# The int4 kernel multiplies by bf16 copies of the blocks' fp16 scales, with bf16
# activations: max |logit difference| / max |logit| against the dequantized import,
# measured 2.1e-4 (Q4_1) and 2.4e-4 (Q4_0) on these tiny models (random, 2 layers); Q8_0
# (two int4 planes) the same way.
INT4_LOGIT_ERROR = 0.01
IDS = torch.tensor([[5, 17, 40, 3, 60, 22, 9, 81, 30, 2, 14, 70]])
LINEARS_PER_LAYER = 7  # q, k, v, o, gate, up, down
KEPT = {"Q4_0": Int4Linear, "Q4_1": Int4Linear, "Q8_0": Int8BlockLinear}


def _q4_file(tmp_path, quant: str, raw_types: dict | None = None, arrays=None):
    arrays = to_gguf(hf_weights()) if arrays is None else arrays
    return write_gguf(tmp_path / f"{quant}.gguf", arrays, metadata(), quant=quant,
                      raw_types=raw_types)  # fmt: skip


def _blocks(path) -> dict[str, tuple[str, bytes]]:
    return {t.name: (t.tensor_type.name, np.asarray(t.data).tobytes())
            for t in gguf.GGUFReader(path).tensors}  # fmt: skip


@pytest.mark.parametrize("quant", ["Q4_0", "Q4_1", "Q8_0"])
def test_blocks_round_trip_bit_exact(tmp_path, capsys, quant):
    source = _q4_file(tmp_path, quant)
    run, back = tmp_path / "run", tmp_path / "back.gguf"
    assert main(["import", "--from", "gguf", str(source), "--keep-quantized",
                 "--out", str(run)]) == 0  # fmt: skip
    assert main(["export", "--checkpoint", str(run), "--to", "gguf", "--precision",
                 quant.lower(), "--out", str(back)]) == 0  # fmt: skip
    before, after = _blocks(source), _blocks(back)
    linears = [n for n, (kind, _) in before.items() if kind == quant and n != "token_embd.weight"]
    assert len(linears) == LAYERS * LINEARS_PER_LAYER
    for name in linears:
        assert after[name] == before[name], name
    record = json.loads((run / "import.json").read_text())
    assert record["details"]["int4"]["linears"] == LAYERS * 5  # q/k/v fused into one
    written = json.loads((run / "checkpoints/step_00000000" / INT4_FILE).read_text())
    kept = written["int8_linears" if quant == "Q8_0" else "linears"]
    assert len(kept) == LAYERS * 5 and written["format"] == (2 if quant == "Q8_0" else 1)


@pytest.mark.parametrize("quant", ["Q4_0", "Q4_1", "Q8_0"])
def test_float_load_is_the_plain_import_bit_for_bit(tmp_path, quant):
    source = _q4_file(tmp_path, quant)
    plain = load_model(import_gguf(source, tmp_path / "plain"), "cpu")
    kept = load_model(import_gguf(source, tmp_path / "kept", keep_quantized=True), "cpu")
    assert kept.weights == "int4"
    assert [type(m) for m in _linears(kept.model)] == [KEPT[quant]] * 5
    with torch.no_grad():
        int4_logits = kept.model(IDS).logits
        float_linears(kept.model)
        ours, theirs = kept.model.state_dict(), plain.model.state_dict()
        assert ours.keys() == theirs.keys()
        assert all(torch.equal(ours[k], theirs[k]) for k in ours)
        reference = plain.model(IDS).logits
        assert torch.equal(kept.model(IDS).logits, reference)
    error = (int4_logits - reference).abs().max() / reference.abs().max()
    assert 0 < error < INT4_LOGIT_ERROR


def _linears(model) -> list:
    layer = model.layers[0]
    return [layer.self_attn.qkv_proj, layer.self_attn.out_proj, *layer.ffn.children()]


def test_the_plan_runs_an_int4_checkpoint_as_int4_unless_told(tmp_path):
    run = import_gguf(_q4_file(tmp_path, "Q4_1"), tmp_path / "kept", keep_quantized=True)
    loaded = load_model(run, "cpu")
    info = CheckpointInfo.of(loaded.model, loaded.family.kind, loaded.weights)
    own = make_plan(info, Machine.here("cpu"), Options())
    assert (own.precision, own.decided("precision"), own.weights) == ("int4", "checkpoint", "int4")
    assert own.linears == "as-loaded"  # the stored blocks; the embedding as the file had it
    assert "GGUF blocks" in own.describe()  # a Q8_0 file's user is told why "int4"
    assert convert(loaded.model, own) is loaded.model
    assert isinstance(loaded.model.layers[0].self_attn.qkv_proj, Int4Linear)
    told = make_plan(info, Machine.here("cpu"), Options(precision="int4"))
    assert (told.linears, told.decided("precision")) == ("int4", "option")
    asked = make_plan(info, Machine.here("cpu"), Options(precision="fp32", path="reference"))
    assert asked.precision == "fp32"
    model = convert(loaded.model, asked)
    assert not any(isinstance(m, Int4Linear) for m in model.modules())
    plain = make_plan(CheckpointInfo("causal_lm"), Machine.here("cpu"), Options())
    assert (plain.precision, plain.decided("precision")) == ("fp32", "default")


def test_precision_left_out_on_the_command_line_is_the_checkpoints():
    import argparse

    from attnkit.cli.common import add_precision_argument
    from attnkit.cli.inference_args import plan_options

    parser = argparse.ArgumentParser()
    add_precision_argument(parser)
    assert plan_options(parser.parse_args([])).precision is None
    assert plan_options(parser.parse_args(["--precision", "fp32"])).precision == "fp32"
    assert parser.parse_args([]).precision == "fp32"  # what commands print stays


def test_a_q8_0_v_keeps_the_fused_qkv_float_with_a_note(tmp_path):
    arrays = to_gguf(hf_weights())
    name = "blk.0.attn_v.weight"
    q8 = gguf.GGMLQuantizationType.Q8_0
    arrays[name] = gguf.quants.quantize(arrays[name], q8)
    run = import_gguf(_q4_file(tmp_path, "Q4_1", {name: q8}, arrays), tmp_path / "kept",
                      keep_quantized=True)  # fmt: skip
    record = json.loads((run.parent.parent / "import.json").read_text())
    notes = " ".join(record["notes"])
    assert "stacked with tensors of other types" in notes and "Q8_0" in notes
    model = load_model(run, "cpu").model
    assert type(model.layers[0].self_attn.qkv_proj) is torch.nn.Linear
    assert isinstance(model.layers[1].self_attn.qkv_proj, Int4Linear)


def test_keep_quantized_is_for_gguf_only_and_in_the_help(tmp_path, capsys):
    assert main(["import", "--from", "hf", str(tmp_path), "--keep-quantized",
                 "--out", str(tmp_path / "x")]) == 2  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--keep-quantized" in err
    with pytest.raises(SystemExit):
        main(["import", "--help"])
    assert "--keep-quantized" in capsys.readouterr().out


def test_a_malformed_int4_json_is_one_line(tmp_path):
    run = import_gguf(_q4_file(tmp_path, "Q4_0"), tmp_path / "kept", keep_quantized=True)
    (run / INT4_FILE).write_text('{"format": 1, "weights": "int4", "group_size": 32, '
                                 '"linears": ["layers.0.nothing"]}')  # fmt: skip
    with pytest.raises(CheckpointError, match="linears: 'layers.0.nothing'"):
        load_model(run, "cpu")
    both = "layers.0.self_attn.out_proj"
    (run / INT4_FILE).write_text(
        json.dumps(
            {
                "format": 2,
                "weights": "int4",
                "group_size": 32,
                "linears": [both],
                "int8_linears": [both],
            }
        )
    )
    with pytest.raises(CheckpointError, match="named twice"):
        load_model(run, "cpu")
    (run / INT4_FILE).write_text('{"format": 3, "weights": "int4", "group_size": 32}')
    with pytest.raises(CheckpointError, match="reads formats 1 and 2"):
        load_model(run, "cpu")


def test_records_are_exact_and_refuse_what_fp32_cannot_hold():
    rows = np.random.default_rng(0).standard_normal((16, 64)).astype(np.float32)
    for kind in ("Q4_0", "Q4_1", "Q8_0"):
        raw = gguf.quants.quantize(rows, gguf.GGMLQuantizationType[kind])
        record = to_record(raw, kind, (16, 64))
        assert record is not None
        remade = make_q8_record(*int8_codes(record)) if kind == "Q8_0" else make_record(
            *codes(record))  # fmt: skip
        assert np.array_equal(to_blocks(remade, kind), raw)
        assert to_blocks(remade, "Q4_0" if kind == "Q8_0" else "Q8_0") is None
        dequantized = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[kind])
        assert torch.equal(dequantize_record(record), torch.from_numpy(dequantized))
    # d = 1, m = 2^-24 (fp16's smallest): 8d + m needs 28 significant bits
    block = np.concatenate([np.float16([1.0, 2.0**-24]).view(np.uint8), np.zeros(16, np.uint8)])
    assert to_record(np.tile(block, (16, 1)), "Q4_1", (16, 32)) is None


def test_smollm2_q4_1_runs_as_its_own_blocks(smollm2, smollm2_run, tmp_path):
    """The real file (~6 s): its 150 Q4_1 linears kept; teacher-forced on the float import's
    greedy continuations, the next token is the float import's at >= 90% of positions
    (measured 98.3% over 10 prompts: experiments/gguf_int4_blocks.py)."""
    from attnkit.decoding.generate import generate
    from attnkit.inference import stepper_for

    run = import_gguf(smollm2, tmp_path / "kept", keep_quantized=True)
    kept, plain = load_model(run, "cpu"), load_model(smollm2_run, "cpu")
    assert sum(isinstance(m, Int4Linear) for m in kept.model.modules()) == 150
    agree = positions = 0
    for prompt in ("The capital of France is", "def fibonacci(n):\n    "):
        ids = torch.tensor([plain.tokenizer.encode(prompt)])
        full = generate(stepper_for(plain.model), ids, 20, temperature=0.0)
        with torch.no_grad():
            want = plain.model(full).logits.argmax(-1)[0, ids.size(1) - 1 : -1]
            got = kept.model(full).logits.argmax(-1)[0, ids.size(1) - 1 : -1]
        agree, positions = agree + int((got == want).sum()), positions + want.numel()
    assert agree >= 0.9 * positions


def test_q4_rows_that_are_not_whole_blocks_are_one_line(tmp_path, capsys):
    """ggml never writes one (nor does gguf's writer): the tensor table is edited to say
    that blk.0.ffn_down's rows hold 80 values, 2.5 Q4_0 blocks."""
    name = "blk.0.ffn_down.weight"
    source = _q4_file(tmp_path, "Q4_0")
    data = source.read_bytes()
    entry = name.encode() + struct.pack("<IQQI", 2, 96, 64, 2)  # dims (ne0, ne1), Q4_0
    assert data.count(entry) == 1
    source.write_bytes(data.replace(entry, name.encode() + struct.pack("<IQQI", 2, 80, 64, 2)))
    for extra in ([], ["--keep-quantized"]):
        assert main(["import", "--from", "gguf", str(source), *extra, "--out",
                     str(tmp_path / "x")]) != 0  # fmt: skip
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and name in err and str(source) in err, err
        assert "rows of 80 values do not split into Q4_0 blocks of 32" in err
