"""--engine ctranslate2|onnxruntime: the same lines as attnkit, a cache that is reused,
rebuilt when stale and never half-written, and one-line refusals."""

from __future__ import annotations

import json
import random
import shutil

import pytest
import torch
from interop_helpers import BPE_TEXT, save_random_model

from attnkit.checkpoints import safe_files, save_checkpoint
from attnkit.cli.inference_args import ENGINES as CLI_ENGINES
from attnkit.cli.main import main
from attnkit.engines import registry as engines
from attnkit.engines.ctranslate2 import CTranslate2Engine
from attnkit.errors import UsageError

TEXTS = ["ein Haus am See", "zwei Hunde", "a dog runs fast by the lake", "Kinder <s> ß",
         "the house", "spielen im Garten schnell", "", "  ",
         "zwei Hunde laufen schnell am See"]  # fmt: skip


@pytest.fixture
def checkpoint(bpe_checkpoint, tmp_path):
    """A private copy of the random BPE checkpoint (the cache is written inside it)."""
    return shutil.copytree(bpe_checkpoint, tmp_path / "ckpt")


@pytest.fixture
def source(tmp_path):
    path = tmp_path / "in.txt"
    path.write_text("".join(t + "\n" for t in TEXTS), encoding="utf-8")
    return path


def translate(capsys, checkpoint, source, *args: str) -> tuple[int, str, str]:
    code = main(["translate", "--checkpoint", str(checkpoint), "--input", str(source), *args])
    out, err = capsys.readouterr()
    return code, out, err


def cache_dirs(checkpoint, name: str) -> list:
    return sorted((checkpoint / "engines").glob(f"{name}-*"))


def test_cli_choices_are_the_registry():
    assert CLI_ENGINES == engines.NAMES


# Greedy; beam with n-best; limits short enough that many rows stop at their own limit.
SEARCHES = [["--greedy", "--max-len-b", "6"], ["--beam", "4", "--nbest", "2", "--max-len-b", "6"],
            ["--greedy", "--max-len-b", "2"], ["--beam", "3", "--max-len-b", "2"]]  # fmt: skip


def test_ctranslate2_lines_equal_attnkit(capsys, checkpoint, source):
    for search in SEARCHES:
        args = [*search, "--alpha", "0"]
        code, expected, _ = translate(capsys, checkpoint, source, *args)
        assert code == 0 and len(expected.splitlines()) == len(TEXTS)
        code, got, _ = translate(capsys, checkpoint, source, *args, "--engine", "ctranslate2")
        assert code == 0 and got == expected, search
    assert len(cache_dirs(checkpoint, "ctranslate2")) == 1  # converted once for all four


@pytest.mark.slow  # the ONNX export (torch.export + onnxscript) takes ~10-20 s on 2 cores
def test_onnxruntime_lines_equal_attnkit(capsys, checkpoint, source):
    # attnkit's own search on the graphs: GNMT's alpha maps one to one.
    gnmt = ["--beam", "4", "--nbest", "2", "--alpha", "0.6", "--max-len-b", "2"]
    for search in [SEARCHES[0], gnmt]:
        code, expected, _ = translate(capsys, checkpoint, source, *search)
        code, got, _ = translate(capsys, checkpoint, source, *search, "--engine", "onnxruntime")
        assert code == 0 and got == expected, search


def test_cache_is_reused_then_rebuilt_when_the_weights_change(capsys, checkpoint, source):
    args = ["--greedy", "--max-len-b", "6", "--engine", "ctranslate2"]
    code, first, err = translate(capsys, checkpoint, source, *args)
    assert code == 0 and err.count("\n") == 1 and "converting" in err
    (cache,) = cache_dirs(checkpoint, "ctranslate2")
    stamp = (cache / "engine.json").stat().st_mtime_ns
    model_stamp = (cache / "model" / "model.bin").stat().st_mtime_ns

    code, again, err = translate(capsys, checkpoint, source, *args)
    assert code == 0 and again == first and err == ""  # no conversion, no message
    assert (cache / "engine.json").stat().st_mtime_ns == stamp
    assert (cache / "model" / "model.bin").stat().st_mtime_ns == model_stamp

    weights = safe_files.load_tensors(checkpoint / "model.safetensors")
    torch.manual_seed(1)
    perturbed = {k: v + 0.5 * torch.randn_like(v) for k, v in weights.items()}
    safe_files.save_tensors(checkpoint / "model.safetensors", perturbed)
    code, changed, err = translate(capsys, checkpoint, source, *args)
    assert code == 0 and err.count("\n") == 1
    assert "is stale (the weights changed)" in err and cache.name in err
    (rebuilt,) = cache_dirs(checkpoint, "ctranslate2")  # the stale one is gone
    assert rebuilt != cache
    _, expected, _ = translate(capsys, checkpoint, source, "--greedy", "--max-len-b", "6")
    assert changed == expected != first


def test_cache_is_rebuilt_for_another_engine_version(capsys, checkpoint, source, monkeypatch):
    args = ["--greedy", "--max-len-b", "4", "--engine", "ctranslate2"]
    assert translate(capsys, checkpoint, source, *args)[0] == 0
    real = CTranslate2Engine.version()
    monkeypatch.setattr(CTranslate2Engine, "version", staticmethod(lambda: "ctranslate2 99.0"))
    code, _, err = translate(capsys, checkpoint, source, *args)
    assert code == 0 and f"({real} -> ctranslate2 99.0)" in err
    (cache,) = cache_dirs(checkpoint, "ctranslate2")
    assert json.loads((cache / "engine.json").read_text())["version"] == "ctranslate2 99.0"


def test_a_failed_conversion_leaves_no_cache(capsys, checkpoint, source, monkeypatch):
    def convert(loaded, out):
        (out / "model.bin").parent.mkdir(parents=True)
        (out / "model.bin").write_bytes(b"half")
        raise OSError(28, "No space left on device", str(out / "model.bin"))

    with monkeypatch.context() as m:
        m.setattr(CTranslate2Engine, "convert", staticmethod(convert))
        code, out, err = translate(capsys, checkpoint, source, "--greedy", "--engine",
                                   "ctranslate2")  # fmt: skip
    assert code == 1 and out == "" and "no space left on device" in err.splitlines()[-1]
    assert cache_dirs(checkpoint, "ctranslate2") == []
    assert not [p for p in (checkpoint / "engines").iterdir()]  # no staging left behind
    code, _, err = translate(capsys, checkpoint, source, "--greedy", "--engine", "ctranslate2")
    assert code == 0 and "converting" in err and len(cache_dirs(checkpoint, "ctranslate2")) == 1


@pytest.mark.parametrize(
    "engine,args,named",
    [
        ("ctranslate2", ["--beam", "4"], "--alpha 0.6"),
        ("ctranslate2", ["--precision", "int8w", "--greedy"], "--precision int8w"),
        ("ctranslate2", ["--sample"], "--sample"),
        ("ctranslate2", ["--compile", "--greedy"], "--compile"),
        ("ctranslate2", ["--compile", "auto", "--greedy"], "--compile"),
        ("onnxruntime", ["--no-fast"], "--no-fast"),
        ("onnxruntime", ["--precision", "int8"], "--precision int8"),
        ("onnxruntime", ["--sample"], "--sample"),
    ],
)
def test_refused_options_are_one_line_and_convert_nothing(
    capsys, checkpoint, source, engine, args, named
):
    code, out, err = translate(capsys, checkpoint, source, *args, "--engine", engine)
    assert code == 2 and out == "" and len(err.splitlines()) == 1
    assert err.startswith(f"attnkit translate: error: {named}:")
    assert not (checkpoint / "engines").exists()


def test_bf16_is_refused_where_ctranslate2_has_no_kernels(capsys, checkpoint, source):
    import ctranslate2

    code, _, err = translate(capsys, checkpoint, source, "--precision", "bf16", "--greedy",
                             "--engine", "ctranslate2")  # fmt: skip
    if "bfloat16" in ctranslate2.get_supported_compute_types("cpu"):
        assert code == 0
    else:
        assert code == 2 and "--precision bf16: CTranslate2 has no bfloat16 kernels" in err


def test_int8_maps_to_the_ctranslate2_compute_type(checkpoint, monkeypatch):
    seen = {}
    real = CTranslate2Engine.__init__

    def spy(self, directory, source, run):
        real(self, directory, source, run)
        seen["compute_type"] = self.translator.compute_type

    monkeypatch.setattr(CTranslate2Engine, "__init__", spy)
    run = engines.RunOptions(precision="int8", threads=1)
    engine = engines.open_engine("ctranslate2", checkpoint, run, engines.DecodeOptions(beam=1),
                                 load=_load, say=lambda line: None)  # fmt: skip
    assert seen["compute_type"] in ("int8", "int8_float32")  # int8 GEMMs, float32 around them
    assert len(engine.translate(["zwei Hunde"], engines.DecodeOptions(beam=1))) == 1


def _load(directory):
    from attnkit.checkpoints.loading import load_model

    return load_model(directory, "cpu")


def test_evaluate_with_ctranslate2_scores_as_attnkit(capsys, checkpoint, tmp_path):
    src, ref = tmp_path / "src.txt", tmp_path / "ref.txt"
    src.write_text("".join(t + "\n" for t in TEXTS[:6]), encoding="utf-8")
    ref.write_text("ein Haus\nzwei Hunde\nein Hund\ndas Haus\nKinder\nim Garten\n", "utf-8")
    scores = {}
    for engine in ("attnkit", "ctranslate2"):
        code = main(["evaluate", "--checkpoint", str(checkpoint), "--src", str(src),
                     "--ref", str(ref), "--beam", "2", "--alpha", "0", "--max-len-b", "6",
                     "--json", "--engine", engine])  # fmt: skip
        assert code == 0
        scores[engine] = json.loads(capsys.readouterr().out)
    assert scores["ctranslate2"]["decode"]["engine"] == "ctranslate2"
    for key in ("bleu", "chrf"):
        assert scores["ctranslate2"][key] == scores["attnkit"][key]
    # Perplexity is attnkit's teacher-forced pass with either engine, on the reference
    # kernel whatever decoded before it (attnkit's own decode installs its CPU backend,
    # whose two-GEMM attention rounds otherwise): the same figure to the last bit.
    assert scores["ctranslate2"]["perplexity"] == scores["attnkit"]["perplexity"]
    code = main(["evaluate", "--checkpoint", str(checkpoint), "--src", str(src), "--ref",
                 str(ref), "--engine", "ctranslate2"])  # fmt: skip
    assert code == 2 and "--alpha 0.6" in capsys.readouterr().err


@pytest.mark.parametrize("beam,nbest", [(1, 1), (3, 2)])
def test_ctranslate2_ids_and_scores_equal_attnkit(checkpoint, beam, nbest):
    from attnkit.decoding.text import decode_ids
    from attnkit.inference import stepper_for

    loaded = _load(checkpoint)
    decode = engines.DecodeOptions(beam=beam, alpha=0.0, nbest=nbest, max_len_b=3)
    engine = engines.open_engine("ctranslate2", checkpoint, engines.RunOptions(threads=1),
                                 decode, load=lambda d: loaded, say=lambda line: None)  # fmt: skip
    src = engine.source.ids(TEXTS)
    got = engine.decode_ids(src, decode)
    with torch.no_grad():
        expected = decode_ids(stepper_for(loaded.model), src, beam=beam, alpha=0.0, nbest=nbest,
                              max_len_b=3, max_len=engine.source.limit)  # fmt: skip
    for hyps, result in zip(got, expected):
        assert [h.tokens for h in hyps] == [h.tokens for h in result.nbest[0][:nbest]]
        assert [h.score for h in hyps] == pytest.approx([h.score for h in result.nbest[0]][:nbest],
                                                        abs=1e-3)  # fmt: skip


@pytest.mark.parametrize("seed,eos_scale", [(12, 10.0), (7, 6.0)])  # 29 and 79 rows settled
def test_one_call_per_batch_equals_one_call_per_limit_but_for_cut_beams(
    bpe_checkpoint, tmp_path, seed, eos_scale
):
    """A batch decoded in one call at its largest limit (rows that reached their own
    limit decoded again) gives every row what a call at its own limit gives, except
    where that call's answer holds a beam cut at the limit (the module doc's case).
    EOS's output row is scaled so that some searches end early and some run on."""
    loaded = _load(bpe_checkpoint)
    tokenizer = loaded.tokenizer
    ckpt = save_random_model(tmp_path / "ckpt", tokenizer, seed=seed)
    state = _load(ckpt).model.state_dict()
    state["output_proj.weight"][tokenizer.eos_id] *= eos_scale
    save_checkpoint(ckpt, model_state=state, config=loaded.model.config.to_dict(),
                    tokenizer_json=tokenizer.to_json())  # fmt: skip
    words = " ".join(BPE_TEXT).split()
    rng = random.Random(seed)
    texts = [" ".join(rng.choices(words, k=rng.randint(1, 12))) for _ in range(64)]
    rows = shared = cut = 0
    for beam, nbest, max_len_b in [(4, 1, 2), (4, 2, 4), (5, 1, 8)]:
        decode = engines.DecodeOptions(beam=beam, alpha=0.0, nbest=nbest, max_len_b=max_len_b)
        engine = engines.open_engine("ctranslate2", ckpt, engines.RunOptions(threads=1), decode,
                                     load=_load, say=lambda line: None)  # fmt: skip
        src = engine.source.ids(texts)
        limits = [engine.source.output_limit(s, max_len_b) for s in src]
        calls: list[int] = []

        def counted(s, rows, *rest, run=engine._run, calls=calls):
            calls.append(len(rows))
            run(s, rows, *rest)

        engine._run = counted
        got = engine.decode_ids(src, decode)
        del engine._run  # the class's method again
        shared += len(src) - sum(calls[1:])  # rows the first call answered for good
        for limit in set(limits):
            group = [i for i in range(len(src)) if limits[i] == limit]
            own = engine.decode_ids([src[i] for i in group], decode)  # one call at `limit`
            for i, expected in zip(group, own):
                rows += 1
                if [h.tokens for h in got[i]] != [h.tokens for h in expected]:
                    cut += 1
                    assert any(len(h.tokens) == limit for h in expected), (i, limit)
    assert rows == 192 and shared >= 20 and cut <= rows // 20  # seed 12: 2 cut


def test_ctranslate2_workers_split_a_call_and_change_no_line(checkpoint):
    """Two single-threaded workers (``inter_threads``) decode parts of each call in
    parallel: the same hypotheses and scores as one worker; onnxruntime refuses them."""
    texts = TEXTS * 3
    got = {}
    for workers in (1, 2):
        run = engines.RunOptions(threads=1, workers=workers)
        engine = engines.open_engine("ctranslate2", checkpoint, run, engines.DecodeOptions(beam=1),
                                     load=_load, say=lambda line: None)  # fmt: skip
        assert engine.translator.num_translators == workers
        for beam in (1, 3):
            decode = engines.DecodeOptions(beam=beam, alpha=0.0, nbest=1, max_len_b=6)
            got[workers, beam] = engine.decode_ids(engine.source.ids(texts), decode)
    for beam in (1, 3):
        one, two = got[1, beam], got[2, beam]
        assert [[h.tokens for h in row] for row in one] == [[h.tokens for h in row] for row in two]
        assert [row[0].score for row in one] == pytest.approx([row[0].score for row in two])
    with pytest.raises(UsageError, match="--engine-workers 2: --engine onnxruntime decodes"):
        engines.open_engine("onnxruntime", checkpoint, engines.RunOptions(workers=2),
                            engines.DecodeOptions(beam=1), load=_load,
                            say=lambda line: None)  # fmt: skip


def test_ctranslate2_a_call_made_while_another_runs_takes_one_worker_whole(checkpoint):
    """A server's two batch workers call ``decode_ids`` side by side: a call that starts
    alone is split over both CTranslate2 workers (``max_batch_size`` = half its rows); one
    that starts while it runs takes the worker left (its rows whole); the lines are
    those of the same calls made one after the other."""
    import threading
    import time

    run = engines.RunOptions(threads=1, workers=2)
    engine = engines.open_engine("ctranslate2", checkpoint, run, engines.DecodeOptions(beam=1),
                                 load=_load, say=lambda line: None)  # fmt: skip
    decode = engines.DecodeOptions(beam=3, alpha=0.0, nbest=1, max_len_b=6)
    inputs = [engine.source.ids(TEXTS * 2), engine.source.ids(list(reversed(TEXTS)) * 2)]
    alone = [engine.decode_ids(src, decode) for src in inputs]

    class Recording:  # the translator, noting each call's split
        def __init__(self, translator) -> None:
            self.translator, self.sizes = translator, []
            self.gate = threading.Barrier(2, timeout=10)

        def translate_batch(self, sources, **kw):
            self.sizes.append((len(sources), kw["max_batch_size"]))
            if len(self.sizes) <= 2:
                self.gate.wait()  # the first call waits until the second has begun
            return self.translator.translate_batch(sources, **kw)

    engine.translator = recording = Recording(engine.translator)
    together: list = [None, None]

    def call(i: int) -> None:
        together[i] = engine.decode_ids(inputs[i], decode)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(2)]
    threads[0].start()
    while not recording.sizes:  # the first call is inside CTranslate2
        time.sleep(0.001)
    threads[1].start()
    for t in threads:
        t.join(30)
    rows = len(inputs[0]) - sum(len(s) <= 1 for s in inputs[0])  # EOS-only rows are skipped
    assert recording.sizes[:2] == [(rows, -(-rows // 2)), (rows, rows)]
    for got, expected in zip(together, alone):
        assert [[h.tokens for h in r] for r in got] == [[h.tokens for h in r] for r in expected]
