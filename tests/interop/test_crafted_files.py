"""Crafted model files: every size is checked against the file before anything is allocated.

A GGUF whose ``llama.block_count`` is 2^32-1, a context of 2^32-1 positions,
a Marian ``config.json`` with 10^9 encoder layers or 2^31 positions: each
import must refuse in seconds with one line on stderr, exit 1, and leave
nothing at ``--out``. They run as ``python -m attnkit import`` in a child
process under an address-space limit (``RLIMIT_AS``), so a regression fails
here instead of eating the machine, and the child's peak RSS is measured
(target: under 1 GB, within 5 s on an idle machine; the bound asserted
leaves room for a busy CI runner). NaN weights and a checkpoint the loader
would refuse are refused in process: they allocate nothing large.
"""

from __future__ import annotations

import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from gguf_helpers import hf_weights, metadata, to_gguf, write_gguf
from interop_helpers import save_random_model

from attnkit.checkpoints.loading import load_model
from attnkit.cli.main import main
from attnkit.data.tokenizers import CharTokenizer
from attnkit.errors import CheckpointError
from attnkit.interop.import_writer import Imported, read_import_record, write_import

REPO = Path(__file__).parents[2]
ADDRESS_SPACE = 3 << 30  # torch maps ~0.7 GB of address space at import; a leak stops here
RSS_LIMIT_MB = 1024
SECONDS = 60  # the target is 5 s on an idle machine; CI runs tests niced beside others


def _high_water_kb(pid: int) -> int:
    """``VmHWM`` of ``pid`` in kB (0 once it has exited)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    return next((int(line.split()[1]) for line in status.splitlines()
                 if line.startswith("VmHWM:")), 0)  # fmt: skip


def run_import(fmt: str, source: Path, out: Path) -> tuple[int, str, float, float]:
    """``attnkit import`` in a child under ``RLIMIT_AS``: exit code, stderr, seconds, peak MB."""
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))

    argv = [sys.executable, "-m", "attnkit", "import", "--from", fmt, str(source),
            "--out", str(out)]  # fmt: skip
    with tempfile.TemporaryFile() as err:
        start = time.monotonic()
        child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, env=env,
                                 preexec_fn=limit)  # fmt: skip
        peak_kb = 0
        while True:
            # The child's own peak RSS after exec: /proc's VmHWM belongs to the new
            # address space (wait4's ru_maxrss would count the pages the child shared
            # with this large test process between fork and exec).
            peak_kb = max(peak_kb, _high_water_kb(child.pid))
            pid, status, _ = os.wait4(child.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - start > 4 * SECONDS:
                child.kill()
            time.sleep(0.02)
        seconds = time.monotonic() - start
        child.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        text = err.read().decode("utf-8", "replace")
    return child.returncode, text, seconds, peak_kb / 1024


def assert_refused(fmt: str, source: Path, out: Path, *needles: str) -> None:
    rc, err, seconds, peak_mb = run_import(fmt, source, out)
    print(f"{source.name}: exit {rc} in {seconds:.2f} s, peak RSS {peak_mb:.0f} MB: {err!r}")
    assert rc == 1, err
    assert err.count("\n") == 1 and err.startswith("attnkit import: error: "), err
    assert str(source) in err and all(n in err for n in needles), err
    assert seconds < SECONDS and peak_mb < RSS_LIMIT_MB
    assert not out.exists() and not list(out.parent.glob(f".{out.name}.*"))


# -- GGUF -------------------------------------------------------------------------------


def test_gguf_block_count_of_2_32_is_refused_before_allocating(tmp_path):
    meta = metadata(llama__block_count=("u32", 2**32 - 1))
    source = write_gguf(tmp_path / "blocks.gguf", to_gguf(hf_weights()), meta)
    assert_refused("gguf", source, tmp_path / "run", "llama.block_count is 4294967295",
                   "holds the tensors of 2")  # fmt: skip


def test_gguf_context_of_2_32_is_refused_before_allocating(tmp_path):
    meta = metadata(llama__context_length=("u32", 2**32 - 1))
    source = write_gguf(tmp_path / "context.gguf", to_gguf(hf_weights()), meta)
    assert_refused("gguf", source, tmp_path / "run", "llama.context_length: 4294967295")


def test_gguf_nan_weight_is_refused_naming_the_tensor(tmp_path, capsys):
    arrays = to_gguf(hf_weights())
    arrays["blk.1.ffn_down.weight"][3, 5] = np.nan
    source = write_gguf(tmp_path / "nan.gguf", arrays, metadata())
    out = tmp_path / "run"
    assert main(["import", "--from", "gguf", str(source), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "tensor blk.1.ffn_down.weight: 1 of" in err, err
    assert "NaN or infinite" in err and not out.exists()


def test_gguf_tokenizer_larger_than_the_model_is_refused(tmp_path, capsys):
    # token_embd has one row fewer than the vocabulary (and no llama.vocab_size):
    # the loader would refuse that checkpoint, so the import writes nothing.
    arrays = to_gguf(hf_weights())
    arrays["token_embd.weight"] = arrays["token_embd.weight"][:-1]
    source = write_gguf(tmp_path / "rows.gguf", arrays, metadata())
    out = tmp_path / "run"
    assert main(["import", "--from", "gguf", str(source), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "do not fit the model's vocabulary" in err, err
    assert not out.exists()


# -- Hugging Face -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def marian_dir(tmp_path_factory) -> Path:
    """A tiny Marian directory as ``attnkit export --to hf`` writes it."""
    tok = CharTokenizer.train(["the quick brown fox jumps over the lazy dog"])
    root = tmp_path_factory.mktemp("marian")
    save_random_model(root / "ckpt", tok, d_model=16, num_heads=2, d_ff=32, max_len=32)
    assert main(["export", "--checkpoint", str(root / "ckpt"), "--to", "hf",
                 "--out", str(root / "hf")]) == 0  # fmt: skip
    return root / "hf"


def crafted(source: Path, directory: Path, **fields) -> Path:
    """A copy of the HF directory ``source`` with ``config.json`` fields replaced."""
    directory.mkdir()
    for file in source.iterdir():
        (directory / file.name).write_bytes(file.read_bytes())
    config = json.loads((source / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, **fields}))
    return directory


def test_hf_encoder_layers_of_1e9_are_refused_before_allocating(marian_dir, tmp_path):
    source = crafted(marian_dir, tmp_path / "layers", encoder_layers=10**9)
    assert_refused("hf", source, tmp_path / "run", "encoder_layers is 1000000000",
                   "holds the tensors of 2")  # fmt: skip


def test_hf_position_count_past_the_ceiling_is_refused(marian_dir, tmp_path):
    source = crafted(marian_dir, tmp_path / "positions", max_position_embeddings=2**31)
    assert_refused("hf", source, tmp_path / "run", "max_position_embeddings: 2147483648")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"encoder_layers": 1e9}, "encoder_layers: expected an integer, got 1000000000.0"),
        ({"d_model": 10**12}, ", 1000000000000) from config.json (vocab_size, d_model)"),
        ({"encoder_ffn_dim": 64, "decoder_ffn_dim": 64}, "fc1.weight: shape (32, 16)"),
        ({"dropout": math.inf}, "dropout: expected a finite number"),
    ],
)
def test_hf_config_sizes_against_the_tensors(marian_dir, tmp_path, capsys, fields, message):
    source = crafted(marian_dir, tmp_path / "hf", **fields)
    out = tmp_path / "run"
    capsys.readouterr()
    assert main(["import", "--from", "hf", str(source), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert not out.exists()


def test_hf_nan_weight_is_refused_naming_the_tensor(marian_dir, tmp_path, capsys):
    from safetensors.torch import load_file, save_file

    source = crafted(marian_dir, tmp_path / "nan")
    weights = load_file(source / "model.safetensors")
    weights["model.decoder.layers.1.fc2.weight"][0, 0] = math.inf
    save_file(weights, source / "model.safetensors", metadata={"format": "pt"})
    out = tmp_path / "run"
    capsys.readouterr()
    assert main(["import", "--from", "hf", str(source), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "tensor model.decoder.layers.1.fc2.weight: 1 of 512 values are NaN" in err, err
    assert not out.exists()


@pytest.fixture(scope="module")
def t5_dir(tmp_path_factory) -> Path:
    """A tiny T5 directory as transformers saves it (2 encoder and 3 decoder blocks)."""
    pytest.importorskip("transformers")
    from test_hf_import_t5 import _hf_t5, _tokenizer_json

    root = tmp_path_factory.mktemp("t5") / "hf"
    _hf_t5("relu", True).save_pretrained(root)
    (root / "tokenizer.json").write_text(_tokenizer_json())
    return root


@pytest.mark.parametrize(
    ("field", "message"),
    [("num_layers", "num_layers is 1000000000 in config.json, but the file holds the tensors "
      "of 2"),
     ("num_decoder_layers", "num_decoder_layers is 1000000000")],
)  # fmt: skip
def test_t5_layer_counts_of_1e9_are_refused_before_allocating(t5_dir, tmp_path, field, message):
    """T5's importer made one tie per layer (10**9 keys) before comparing the layer count
    with the file's tensors: it ran out of memory."""
    source = crafted(t5_dir, tmp_path / "t5", **{field: 10**9})
    assert_refused("hf", source, tmp_path / "run", message)


# -- the writer -------------------------------------------------------------------------


def test_nothing_the_loader_refuses_is_written(tmp_path):
    """The writer loads what it wrote before renaming it into place (a missing tensor here)."""
    from tokenizers import Tokenizer, models

    from attnkit.data.pretrained_tokenizer import PretrainedTokenizer
    from attnkit.models import EncoderDecoder, TransformerConfig

    vocab = {t: i for i, t in enumerate(["<pad>", "<s>", "</s>", "<unk>", "a", "b"])}
    hf = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer = PretrainedTokenizer(hf, pad_id=0, bos_id=1, eos_id=2, unk_id=3)
    cfg = TransformerConfig(d_model=16, num_heads=2, d_ff=32, num_encoder_layers=1,
                            num_decoder_layers=1, src_vocab_size=6, tgt_vocab_size=6,
                            max_len=16)  # fmt: skip
    state = EncoderDecoder(cfg).state_dict()
    del state["decoder.layers.0.ffn.w2.weight"]
    out = tmp_path / "run"
    with pytest.raises(CheckpointError, match="loader refuses .* missing"):
        write_import(Imported(cfg, state, tokenizer, "hf", "marian"), tmp_path / "src", out)
    assert not out.exists() and not list(tmp_path.glob(".run.*"))


def test_directories_of_both_earlier_writers_still_load(tmp_path):
    tok = CharTokenizer.train(["the quick brown fox"])
    # The first GGUF writer: the checkpoint at --out itself, "from": "gguf".
    gguf_dir = save_random_model(tmp_path / "gguf_run", tok)
    old = {"from": "gguf", "source": "/x.gguf", "architecture": "llama", "name": "tiny",
           "pre_tokenizer": "smollm", "dtype": "float32"}  # fmt: skip
    (gguf_dir / "import.json").write_text(json.dumps(old))
    # The first HF writer: checkpoints/step_00000000 and the same record keys, no details.
    hf_run = tmp_path / "hf_run"
    save_random_model(hf_run / "checkpoints" / "step_00000000", tok)
    old_hf = {"source": "/m", "format": "hf", "model_type": "marian", "architectures": None,
              "family": "transformer", "attnkit": "0", "date": "2026", "notes": []}  # fmt: skip
    (hf_run / "import.json").write_text(json.dumps(old_hf))
    for run in (gguf_dir, hf_run):
        assert load_model(run, "cpu").config.family == "transformer"
    record = read_import_record(gguf_dir)
    assert (record["format"], record["model_type"]) == ("gguf", "llama")
    assert record["details"]["pre_tokenizer"] == "smollm"
    record = read_import_record(hf_run)
    assert record["format"] == "hf" and record["details"] == {"architectures": None}
