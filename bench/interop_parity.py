"""Parity and speed of the three exports against ``attnkit translate`` on a test set.

    flock /tmp/attnkit-cpu.lock python bench/interop_parity.py \\
        --checkpoint /tmp/m30k_interop --src ../shared/data/multi30k/test2016.de \\
        --work /tmp/interop_bench --json bench/interop_parity.json

Exports the checkpoint to ``hf``, ``ctranslate2`` and ``onnx`` under
``--work``, then decodes every line with each engine and counts the lines
identical to attnkit's (``translate_texts``, what ``attnkit translate``
runs, batch 64):

* searches: greedy; beam 4 with ``alpha 0`` (transformers'
  ``length_penalty=0``, CTranslate2's ``length_penalty=0``: the same search on
  every side); beam 4 with ``alpha 0.6`` (GNMT's penalty in attnkit and the
  ONNX runner, ``len ** 0.6`` in transformers and CTranslate2: not the same
  ranking, so this measures how often that matters);
* limits: attnkit stops each output at source length + 50 tokens; the
  other engines take one limit per call, so they decode groups of sentences
  with equal source length (at most 64 per call) with that group's limit;
* speed: sentences/s of the whole set per engine and search, fp32, the
  same thread count everywhere (``--threads``); attnkit and the ONNX runner
  batch 64 length-sorted sentences, transformers and CTranslate2 the
  equal-length groups.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from attnkit.checkpoints.loading import load_model
from attnkit.inference.prepare import translate_texts

SEARCHES = {"greedy": (1, 0.0), "beam4_alpha0": (4, 0.0), "beam4_alpha0.6": (4, 0.6)}
MAX_LEN_B = 50


def groups(lengths: list[int], size: int = 64) -> list[list[int]]:
    """Indices grouped by equal source length, at most ``size`` per group."""
    by_len: dict[int, list[int]] = {}
    for i, n in enumerate(lengths):
        by_len.setdefault(n, []).append(i)
    return [
        idx[s : s + size] for _, idx in sorted(by_len.items()) for s in range(0, len(idx), size)
    ]


def timed(fn: Callable[[], list[str]]) -> tuple[list[str], float]:
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def hf_engine(directory: Path, texts: list[str], lengths: list[int]) -> Callable[..., list[str]]:
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(directory)
    model = AutoModelForSeq2SeqLM.from_pretrained(directory).eval()

    def run(beam: int, alpha: float) -> list[str]:
        out = [""] * len(texts)
        for idx in groups(lengths):
            enc = tok([texts[i] for i in idx], return_tensors="pt", padding=True)
            with torch.no_grad():
                ids = model.generate(**enc, num_beams=beam, length_penalty=alpha,
                                     max_new_tokens=lengths[idx[0]] + 1 + MAX_LEN_B)  # fmt: skip
            for i, line in zip(idx, tok.batch_decode(ids, skip_special_tokens=True)):
                out[i] = line
        return out

    return run


def ct2_engine(directory: Path, texts: list[str], lengths: list[int], threads: int):
    import ctranslate2
    import tokenizers

    tok = tokenizers.Tokenizer.from_file(str(directory / "tokenizer.json"))
    translator = ctranslate2.Translator(str(directory), intra_threads=threads)
    pieces = [tok.encode(t).tokens for t in texts]

    def run(beam: int, alpha: float) -> list[str]:
        out = [""] * len(texts)
        for idx in groups(lengths):
            results = translator.translate_batch(
                [pieces[i] for i in idx], beam_size=beam, length_penalty=alpha,
                min_decoding_length=0, max_decoding_length=lengths[idx[0]] + 1 + MAX_LEN_B,
            )  # fmt: skip
            for i, r in zip(idx, results):
                out[i] = tok.decode([tok.token_to_id(t) for t in r.hypotheses[0]])
        return out

    return run


def onnx_engine(directory: Path, texts: list[str], threads: int):
    from attnkit.engines import onnx_runner

    stepper, tokenizer = onnx_runner.load(directory, threads=threads)

    def run(beam: int, alpha: float) -> list[str]:
        return onnx_runner.translate(stepper, tokenizer, texts, beam=beam, alpha=alpha)

    return run, stepper


def onnx_logit_gap(model: Any, stepper: Any, tokenizer: Any, texts: list[str]) -> float:
    """Max |logit difference| over greedy steps (attnkit's tokens fed to both)."""
    limit = model.config.max_len - 1
    ids = [tokenizer.encode(t)[:limit] + [tokenizer.eos_id] for t in texts]
    width = max(map(len, ids))
    src = torch.full((len(ids), width), model.pad_id)
    for row, seq in enumerate(ids):
        src[row, : len(seq)] = torch.tensor(seq)
    ours, theirs = model.start(src), stepper.start(src)
    tokens, gap = torch.full((len(ids),), model.bos_id), 0.0
    for _ in range(20):
        with torch.no_grad():
            expected, ours = model.step(tokens, ours)
        got, theirs = stepper.step(tokens, theirs)
        gap = max(gap, (got - expected).abs().max().item())
        tokens = expected.argmax(-1)
    return gap


def export_all(checkpoint: str, work: Path) -> dict[str, float]:
    from attnkit.interop.ctranslate2.export import export_ctranslate2
    from attnkit.interop.hf.export import export_hf
    from attnkit.interop.onnx.export import export_onnx

    seconds = {}
    for name, fn in (("hf", export_hf), ("ctranslate2", export_ctranslate2),
                     ("onnx", export_onnx)):  # fmt: skip
        loaded = load_model(checkpoint, "cpu")
        start = time.perf_counter()
        fn(loaded, work / name, overwrite=True)
        seconds[name] = round(time.perf_counter() - start, 1)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--src", required=True)
    parser.add_argument("--work", required=True, help="directory for the exports")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--limit", type=int, help="first N lines only")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--engines", default="hf,ctranslate2,onnx")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    work = Path(args.work)
    texts = Path(args.src).read_text(encoding="utf-8").splitlines()[: args.limit]
    loaded = load_model(args.checkpoint, "cpu")
    model, tok = loaded.model, loaded.tokenizer
    lengths = [len(tok.encode(t)) for t in texts]
    report: dict[str, Any] = {
        "checkpoint": str(loaded.directory), "sentences": len(texts), "threads": args.threads,
        "cpu": subprocess.run(["lscpu"], capture_output=True, text=True).stdout.split(
            "Model name:")[-1].splitlines()[0].strip(),
        "date": datetime.date.today().isoformat(), "python": platform.python_version(),
        "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                 text=True).stdout.strip(),
        "export_seconds": export_all(args.checkpoint, work), "results": {},
    }  # fmt: skip
    reference = {}
    for search, (beam, alpha) in SEARCHES.items():
        out, sec = timed(
            lambda b=beam, a=alpha: translate_texts(model, tok, texts, beam=b, alpha=a)
        )
        reference[search] = out
        report["results"][f"attnkit/{search}"] = {"sentences_per_s": round(len(texts) / sec, 2)}
        at_limit = sum(len(tok.encode(o)) >= n + 1 + MAX_LEN_B - 1 for o, n in zip(out, lengths))
        report["results"][f"attnkit/{search}"]["near_limit_lines"] = at_limit
    engines: dict[str, Callable[..., list[str]]] = {}
    names = args.engines.split(",")
    if "hf" in names:
        engines["transformers"] = hf_engine(work / "hf", texts, lengths)
    if "ctranslate2" in names:
        engines["ctranslate2"] = ct2_engine(work / "ctranslate2", texts, lengths, args.threads)
    if "onnx" in names:
        engines["onnx_runner"], stepper = onnx_engine(work / "onnx", texts, args.threads)
        report["onnx_max_logit_gap"] = onnx_logit_gap(model, stepper, tok, texts[:32])
    for engine, run in engines.items():
        for search, (beam, alpha) in SEARCHES.items():
            out, sec = timed(lambda r=run, b=beam, a=alpha: r(b, a))
            same = sum(a == b for a, b in zip(out, reference[search]))
            report["results"][f"{engine}/{search}"] = {
                "identical_lines": same, "identical_pct": round(100 * same / len(texts), 2),
                "sentences_per_s": round(len(texts) / sec, 2),
            }  # fmt: skip
            print(engine, search, report["results"][f"{engine}/{search}"], flush=True)
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
