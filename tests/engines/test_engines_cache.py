"""Every engine's cache is verified before it is loaded, through the real commands.

For CTranslate2 (``translate``), onnxruntime (``translate``, slow: the ONNX
export), llama.cpp (``generate``) and ``serve --engine`` (``open_translator``):
a damaged cache (a FIFO as ``engine.json`` or as a model file, garbage of the
right size, a link loop, ``model/`` linked elsewhere, a missing file) makes
one stderr line saying why it is rebuilt, exit 0, the output of a sound cache
and no traceback; the next run says nothing. A cache that cannot be removed
is refused in one line naming it (exit 1). No case may block: a watchdog
fails it instead (``cache_damage.watchdog``).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
from pathlib import Path

import pytest
from cache_damage import DAMAGE, watchdog

from attnkit.checkpoints.loading import load_model
from attnkit.cli.main import main
from attnkit.engines import cache as engines_cache
from attnkit.engines.onnxruntime import OnnxRuntimeEngine
from attnkit.engines.registry import RunOptions

TEXTS = ["ein Haus am See", "zwei Hunde", "the house", "spielen im Garten schnell", ""]
GREEDY = ["--greedy", "--alpha", "0", "--max-len-b", "6"]


def run_main(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with watchdog(120), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def cache_of(checkpoint: Path, engine: str) -> Path:
    (cache,) = (checkpoint / "engines").glob(f"{engine}-*")
    return cache


def assert_rebuilt_once(code: int, err: str, cache: Path, why: str) -> None:
    assert code == 0, err
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert f"engine cache {cache} failed verification (" in err and why in err
    assert err.rstrip().endswith("; rebuilding")


# -- CTranslate2 through `attnkit translate` ------------------------------------------------


@pytest.fixture(scope="module")
def ct2_built(bpe_checkpoint, tmp_path_factory) -> tuple[Path, Path, str]:
    """A checkpoint with a sound CTranslate2 cache, its input, and the lines it translates."""
    root = tmp_path_factory.mktemp("ct2")
    checkpoint = shutil.copytree(bpe_checkpoint, root / "ckpt")
    source = root / "in.txt"
    source.write_text("".join(t + "\n" for t in TEXTS), encoding="utf-8")
    code, out, err = run_main(["translate", "--checkpoint", str(checkpoint), "--input",
                               str(source), *GREEDY, "--engine", "ctranslate2"])  # fmt: skip
    assert code == 0 and "converting" in err and len(out.splitlines()) == len(TEXTS)
    return checkpoint, source, out


def translate_ct2(checkpoint: Path, source: Path) -> tuple[int, str, str]:
    return run_main(["translate", "--checkpoint", str(checkpoint), "--input", str(source),
                     *GREEDY, "--engine", "ctranslate2"])  # fmt: skip


@pytest.mark.parametrize("damage", ["fifo_manifest", "fifo_model", "garbage_same_size",
                                    "link_loop", "model_dir_elsewhere", "missing"])  # fmt: skip
def test_ctranslate2_rebuilds_a_damaged_cache_in_one_line(ct2_built, tmp_path, damage):
    built, source, expected = ct2_built
    checkpoint = shutil.copytree(built, tmp_path / "ckpt", symlinks=True)
    cache = cache_of(checkpoint, "ctranslate2")
    why = DAMAGE[damage](cache, "model/model.bin")
    code, out, err = translate_ct2(checkpoint, source)
    assert_rebuilt_once(code, err, cache, why)
    assert out == expected
    assert translate_ct2(checkpoint, source) == (0, expected, "")  # trusted as it is


def test_a_cache_that_cannot_be_replaced_is_refused_in_one_line(ct2_built, tmp_path, monkeypatch):
    built, source, _ = ct2_built
    checkpoint = shutil.copytree(built, tmp_path / "ckpt", symlinks=True)
    cache = cache_of(checkpoint, "ctranslate2")
    DAMAGE["garbage_same_size"](cache, "model/model.bin")

    def read_only(path: Path) -> None:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(engines_cache, "_discard", read_only)
    code, out, err = translate_ct2(checkpoint, source)
    assert code == 1 and out == "" and len(err.splitlines()) == 1 and "Traceback" not in err
    assert str(cache) in err and "model/model.bin digest differs" in err
    assert "cannot be removed (permission denied)" in err


def test_an_engines_directory_that_is_a_link_loop_is_one_line(ct2_built, tmp_path):
    _, source, _ = ct2_built
    checkpoint = shutil.copytree(ct2_built[0], tmp_path / "ckpt", symlinks=True)
    shutil.rmtree(checkpoint / "engines")
    (checkpoint / "engines").symlink_to(checkpoint / "engines")
    code, out, err = translate_ct2(checkpoint, source)
    lines = err.splitlines()
    assert code in (1, 2) and out == "" and len(lines) <= 3 and "Traceback" not in err
    assert str(checkpoint / "engines") in lines[-1]


def test_serve_engine_rebuilds_a_damaged_cache(ct2_built, tmp_path):
    from attnkit.serve.engine_translator import open_translator

    built, _, expected = ct2_built
    checkpoint = shutil.copytree(built, tmp_path / "ckpt", symlinks=True)
    cache = cache_of(checkpoint, "ctranslate2")
    why = DAMAGE["fifo_manifest"](cache, "model/model.bin")
    loaded = load_model(checkpoint, "cpu")
    said: list[str] = []
    with watchdog(120):
        translator = open_translator("ctranslate2", loaded, RunOptions(threads=1), alpha=0.0,
                                     say=said.append)  # fmt: skip
    (line,) = said
    assert f"engine cache {cache} failed verification (" in line and why in line
    assert translator is not None
    said.clear()
    with watchdog(120):
        open_translator("ctranslate2", loaded, RunOptions(threads=1), alpha=0.0, say=said.append)
    assert said == []


# -- onnxruntime through `attnkit translate` ------------------------------------------------


@pytest.mark.slow  # the ONNX export (torch.export + onnxscript) takes ~10-20 s on 2 cores
def test_onnxruntime_rebuilds_a_damaged_cache(bpe_checkpoint, tmp_path, monkeypatch):
    checkpoint = shutil.copytree(bpe_checkpoint, tmp_path / "ckpt")
    source = tmp_path / "in.txt"
    source.write_text("".join(t + "\n" for t in TEXTS), encoding="utf-8")
    argv = ["translate", "--checkpoint", str(checkpoint), "--input", str(source), *GREEDY,
            "--engine", "onnxruntime"]  # fmt: skip
    code, expected, err = run_main(argv)
    assert code == 0 and "converting" in err
    cache = cache_of(checkpoint, "onnxruntime")
    pristine = shutil.copytree(cache / "model", tmp_path / "pristine")
    # The rebuild copies the first export instead of exporting again (another 10-20 s):
    # what is checked is that the damage is seen, and that the rebuilt cache loads.
    monkeypatch.setattr(
        OnnxRuntimeEngine,
        "convert",
        staticmethod(lambda loaded, out: shutil.copytree(pristine, out)),
    )
    for damage, file in [("garbage_same_size", "model/decoder.onnx"),
                         ("fifo_model", "model/encoder.onnx"), ("fifo_manifest", "")]:  # fmt: skip
        why = DAMAGE[damage](cache, file)
        code, out, err = run_main(argv)
        assert_rebuilt_once(code, err, cache, why)
        assert out == expected
        assert run_main(argv) == (0, expected, "")


# -- llama.cpp through `attnkit generate` ---------------------------------------------------


@pytest.fixture
def llama_checkpoint(tmp_path) -> Path:
    pytest.importorskip("llama_cpp")
    pytest.importorskip("gguf")
    from gguf_helpers import save_llama, tiny_tokenizer

    return save_llama(tmp_path / "ckpt", tiny_tokenizer(), seed=1, max_len=64)


@pytest.mark.parametrize(
    "damage, file",
    [("garbage_same_size", "model/model-f32.gguf"), ("fifo_model", "model/probe.json")],
)
def test_llama_cpp_rebuilds_a_damaged_cache_in_one_line(llama_checkpoint, damage, file):
    argv = ["generate", "--checkpoint", str(llama_checkpoint), "--prompt", "hello",
            "--temperature", "0", "--no-echo", "--ignore-eos", "--max-new-tokens", "8",
            "--engine", "llama.cpp"]  # fmt: skip
    code, expected, err = run_main(argv)
    assert code == 0 and "converting" in err
    cache = cache_of(llama_checkpoint, "llama.cpp")
    why = DAMAGE[damage](cache, file)
    code, out, err = run_main(argv)
    assert_rebuilt_once(code, err, cache, why)
    assert out == expected
    assert run_main(argv) == (0, expected, "")


# -- what the engines say about a directory that was never verified ------------------------


def test_engines_loading_garbage_raise_one_line_engine_errors(tmp_path, bpe_checkpoint):
    """Outside the cache (``onnx_runner DIR``) or should a file change after the check:
    the engine's own failure is an ``EngineError`` naming the file, not the catch-all."""
    from attnkit.data.tokenizer_kinds import load_tokenizer
    from attnkit.engines.base import SourceSide
    from attnkit.engines.ctranslate2 import CTranslate2Engine
    from attnkit.engines.onnx_runner import OnnxStepper
    from attnkit.errors import EngineError, UsageError

    (tmp_path / "model.bin").write_bytes(bytes(range(256)) * 4)
    source = SourceSide(load_tokenizer(bpe_checkpoint / "tokenizer.json"), 10)
    with pytest.raises(EngineError, match="--engine ctranslate2: cannot load") as e:
        CTranslate2Engine(tmp_path, source, RunOptions())
    assert "\n" not in str(e.value)
    meta = {"format": "attnkit-onnx", "pad_id": 0, "bos_id": 1, "eos_id": 2, "max_len": 8}
    (tmp_path / "config.json").write_text(json.dumps(meta))
    for name in ("encoder.onnx", "decoder.onnx"):
        (tmp_path / name).write_bytes(bytes(range(256)))
    with pytest.raises(EngineError, match="encoder.onnx: onnxruntime cannot load it"):
        OnnxStepper(tmp_path)
    (tmp_path / "config.json").unlink()
    os.mkfifo(tmp_path / "config.json")
    with watchdog(60), pytest.raises(UsageError, match="not a regular file"):
        OnnxStepper(tmp_path)
