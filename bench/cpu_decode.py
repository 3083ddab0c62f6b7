"""Issue 12: CPU decoding, attnkit (fp32, bf16, int8) against HF ``generate`` and CTranslate2.

One random ``base`` model (fixed seed; vocabulary laid out for CT2, see
``engines.py``) runs in every engine on the same source batch, every output
forced to ``--out-len`` tokens (EOS forbidden until then, the length cap ends
it there), greedy and beam 4, timed round-robin (``common.round_robin``).

Engines (``--engines``, comma-separated):

* ``attnkit_reference`` -- ``--no-fast``: the model's own cache, plain
  ``nn.Linear`` (MKL's sgemm);
* ``attnkit_fp32``, ``attnkit_bf16``, ``attnkit_int8`` -- ``--precision``:
  ``quantize_model(model, ...)`` (oneDNN-packed fp32/bf16, fbgemm int8) on
  the CPU fast path (``stepper_for(model, "fast")``);
* ``attnkit_plain`` -- fp32 on the same fast path with MKL's plain linears
  (``quantize_model(model, "fp32", pack_fp32=False)``): ``--precision fp32``
  takes whichever of the two this machine runs faster (``fp32_choice``);
* ``attnkit_static`` (not in the default list) -- the static cache (the GPU's
  fast path) with plain linears;
* ``attnkit_compiled`` (not in the default list) -- ``--compile``: the static
  cache, compiled (inductor C++ on CPU; the first run's time, compile
  included, is printed);
* ``hf``           -- ``MarianMTModel.generate`` (``min_new_tokens = max_new_tokens``);
* ``ct2_fp32``, ``ct2_int8`` -- ``ctranslate2.Translator.translate_batch``
  (``compute_type`` float32 / int8, ``min_decoding_length = max_decoding_length``).

HF and CT2 rows need ``transformers`` / ``ctranslate2`` (the ``bench`` extra);
missing ones are skipped with a note. The table gives sentences/s (median of
``--rounds``), the ratio to ``ct2_int8``, ``ct2_fp32`` and ``hf``, and the share
of sentences and of tokens identical to ``attnkit_fp32`` for the same search.
``--memory`` adds each engine's resident-memory growth (RSS after loading its
weights, measured in a fresh subprocess per engine).

Run: ``python bench/cpu_decode.py --threads 2 --rounds 3 --json out.json``.
"""

from __future__ import annotations

import argparse
import copy
import ctypes
import gc
import importlib.util
import json
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
from common import environment, format_table, load_average, median, round_robin
from engines import build_model, random_source, to_ct2, to_hf, vocabulary

from attnkit.decoding import StaticCacheStepper, beam_search, greedy_search
from attnkit.decoding.constraints import MinLength
from attnkit.inference import stepper_for
from attnkit.quantize import model_bytes, quantize_model

ALL_ENGINES = ["attnkit_reference", "attnkit_fp32", "attnkit_plain", "attnkit_bf16",
               "attnkit_int8", "hf", "ct2_fp32", "ct2_int8"]  # fmt: skip
OTHER_ENGINES = ["attnkit_static", "attnkit_compiled"]
REFERENCE = "attnkit_fp32"  # token agreement is measured against this engine
CT2_COMPUTE = {"ct2_fp32": "float32", "ct2_int8": "int8"}
Run = Callable[[], list[list[int]]]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--engines", default=",".join(ALL_ENGINES))
    p.add_argument("--beams", default="1,4", help="comma-separated beam sizes (1 = greedy)")
    p.add_argument("--rounds", type=int, default=3, help="timed round-robin rounds (median)")
    p.add_argument("--threads", type=int, default=2, help="intra-op threads, every engine")
    p.add_argument("--batch", type=int, default=32, help="source sentences")
    p.add_argument("--src-len", type=int, default=32, help="source tokens per sentence")
    p.add_argument("--out-len", type=int, default=40, help="forced output tokens")
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--preset", default="base")
    p.add_argument("--memory", action="store_true", help="also measure resident memory")
    p.add_argument("--json", help="also write the figures to this file")
    p.add_argument("--rss-of", help=argparse.SUPPRESS)  # child process: one engine's RSS
    p.add_argument("--ct2-dir", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def attnkit_runner(stepper: Any, src: torch.Tensor, k: int, new: int) -> Run:
    """A run of greedy (``k == 1``) or beam-``k`` search forced to ``new`` tokens."""

    def run() -> list[list[int]]:
        forced = MinLength(stepper, new)
        if k == 1:
            return greedy_search(forced, src, max_len=new).tokens
        return beam_search(forced, src, beam_size=k, alpha=0.6, max_len=new).tokens

    return run


def hf_runner(hf: Any, src: torch.Tensor, k: int, new: int) -> Run:
    mask = torch.ones_like(src)

    def run() -> list[list[int]]:
        out = hf.generate(input_ids=src, attention_mask=mask, num_beams=k, do_sample=False,
                          max_new_tokens=new, min_new_tokens=new, early_stopping=False)  # fmt: skip
        return out[:, 1:].tolist()  # drop the decoder start token

    return run


def ct2_runner(translator: Any, src: torch.Tensor, k: int, new: int, vocab: list[str]) -> Run:
    tokens = [[vocab[i] for i in row] for row in src.tolist()]
    index = {t: i for i, t in enumerate(vocab)}

    def run() -> list[list[int]]:
        out = translator.translate_batch(tokens, beam_size=k, max_decoding_length=new,
                                         min_decoding_length=new, length_penalty=0.6)  # fmt: skip
        return [[index[t] for t in r.hypotheses[0]] for r in out]

    return run


def attnkit_stepper(name: str, model: Any) -> Any:
    """The stepper of an ``attnkit_*`` engine (converted copies for the precisions)."""
    if name == "attnkit_reference":
        return stepper_for(model, "reference")
    if name == "attnkit_static":
        return StaticCacheStepper(model)
    if name == "attnkit_compiled":
        return stepper_for(model, "compiled")
    if name == "attnkit_plain":  # fp32 with MKL's plain linears (fp32_choice's other pick)
        return stepper_for(quantize_model(copy.deepcopy(model), "fp32", pack_fp32=False))
    return stepper_for(quantize_model(copy.deepcopy(model), name.removeprefix("attnkit_")))


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def trimmed_rss() -> int:
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)  # give freed heap pages back before reading
    except (OSError, AttributeError):
        pass
    return rss_bytes()


def rss_child(args: argparse.Namespace) -> None:
    """Print the RSS growth of loading one engine's weights (run in a fresh process)."""
    torch.set_num_threads(args.threads)
    name = args.rss_of
    before = trimmed_rss()
    if name.startswith("ct2_"):
        import ctranslate2

        compute = CT2_COMPUTE[name]
        kept: Any = ctranslate2.Translator(args.ct2_dir, device="cpu", compute_type=compute)
    else:
        model = build_model(args.vocab, args.preset)
        kept = attnkit_stepper(name, model)
        if name in ("attnkit_fp32", "attnkit_plain", "attnkit_bf16", "attnkit_int8"):
            del model  # the float model is gone; only the converted copy stays
    after = trimmed_rss()
    weights = kept if isinstance(kept, torch.nn.Module) else getattr(kept, "model", None)
    print(after - before, -1 if weights is None else model_bytes(weights))


def measure_memory(args: argparse.Namespace, engines: list[str], ct2_dir: str | None) -> dict:
    out = {}
    for name in engines:
        if name in ("hf", "attnkit_static") or (name.startswith("ct2_") and ct2_dir is None):
            continue
        cmd = [sys.executable, __file__, "--rss-of", name, "--vocab", str(args.vocab),
               "--preset", args.preset, "--threads", str(args.threads)]  # fmt: skip
        if ct2_dir:
            cmd += ["--ct2-dir", ct2_dir]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            print(f"memory of {name}: failed ({res.stderr.strip().splitlines()[-1:]})")
            continue
        rss, counted = (int(x) for x in res.stdout.split()[-2:])
        out[name] = {
            "rss_mib": rss / 2**20,
            "weights_mib": counted / 2**20 if counted >= 0 else None,
        }
    return out


def agreement(a: list[list[int]], b: list[list[int]]) -> tuple[float, float]:
    """Share of identical sentences, and of identical tokens position by position."""
    same = sum(x == y for x, y in zip(a, b)) / len(a)
    pairs = [(p, q) for x, y in zip(a, b) for p, q in zip(x, y)]
    total = sum(max(len(x), len(y)) for x, y in zip(a, b))
    return same, sum(p == q for p, q in pairs) / max(1, total)


def main() -> None:
    args = parse_args()
    if args.rss_of:
        return rss_child(args)
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    engines = args.engines.split(",")
    beams = [int(b) for b in args.beams.split(",")]
    model = build_model(args.vocab, args.preset)
    src = random_source(args.batch, args.src_len, args.vocab)
    vocab, new = vocabulary(args.vocab), args.out_len
    have_hf = importlib.util.find_spec("transformers") is not None
    have_ct2 = importlib.util.find_spec("ctranslate2") is not None
    runners: dict[tuple[str, int], Run] = {}
    hf, ct2_dir = None, None
    for name in engines:
        if name.startswith("attnkit") and name in ALL_ENGINES + OTHER_ENGINES:
            stepper = attnkit_stepper(name, model)
            for k in beams:
                runners[(name, k)] = attnkit_runner(stepper, src, k, new)
        elif name == "hf" and have_hf:
            hf = hf or to_hf(model)
            for k in beams:
                runners[(name, k)] = hf_runner(hf, src, k, new)
        elif name.startswith("ct2_") and have_ct2 and (have_hf or ct2_dir):
            import ctranslate2

            ct2_dir = ct2_dir or to_ct2(hf or to_hf(model))
            compute = CT2_COMPUTE[name]
            tr = ctranslate2.Translator(ct2_dir, device="cpu", compute_type=compute,
                                        intra_threads=args.threads, inter_threads=1)  # fmt: skip
            for k in beams:
                runners[(name, k)] = ct2_runner(tr, src, k, new, vocab)
        else:
            why = "needs transformers" if name == "hf" else "needs ctranslate2 and transformers"
            known = name in ALL_ENGINES + OTHER_ENGINES
            print(f"skipped {name}: {why if known else 'unknown engine'}")

    env = environment(torch.device("cpu"))
    env["ctranslate2"] = __import__("ctranslate2").__version__ if have_ct2 else "not installed"
    for key, value in env.items():
        print(f"{key}: {value}")
    print(f"setup: {args.preset} preset, vocab {args.vocab}, {args.batch} sentences x "
          f"{args.src_len} tokens -> {new} tokens, {args.threads} threads, "
          f"{args.rounds} rounds")  # fmt: skip
    outputs: dict[tuple[str, int], list[list[int]]] = {}
    first: dict[tuple[str, int], float] = {}
    with torch.inference_mode():
        for key, run in runners.items():  # warm-up: oneDNN primitives, allocator, compiles
            t0 = time.perf_counter()
            outputs[key] = run()
            first[key] = time.perf_counter() - t0
        times = round_robin(runners, args.rounds, torch.device("cpu"))

    def speed(name: str, k: int) -> float | None:
        return args.batch / median(times[(name, k)]) if (name, k) in times else None

    results, rows = [], []
    for (name, k), ts in times.items():
        sps = args.batch / median(ts)
        ref = outputs.get((REFERENCE, k))
        same, tok = agreement(outputs[(name, k)], ref) if ref else (None, None)
        r = {"engine": name, "beam": k, "sentences_per_s": sps, "seconds_all": ts,
             "first_run_s": first[(name, k)],
             "identical_sentences": same, "identical_tokens": tok}  # fmt: skip
        for peer in ("ct2_int8", "ct2_fp32", "hf"):
            other = speed(peer, k)
            r[f"vs_{peer}"] = sps / other if other else None
        results.append(r)
        rows.append([name, "greedy" if k == 1 else f"beam {k}", f"{sps:.1f}",
                     f"{min(ts):.2f}-{max(ts):.2f}", f"{args.batch / min(ts):.1f}",
                     f"{first[(name, k)]:.1f}",
                     *("-" if r[f"vs_{p}"] is None else f"{r[f'vs_{p}']:.2f}x"
                       for p in ("ct2_int8", "ct2_fp32", "hf")),
                     "-" if same is None else f"{same:.0%}",
                     "-" if tok is None else f"{tok:.1%}"])  # fmt: skip
    print()
    print(format_table(["engine", "search", "sent/s", "s/run min-max", "best sent/s", "1st run s",
                        "vs ct2_int8", "vs ct2_fp32",
                        "vs hf", "same sent.", "same tokens"], rows))  # fmt: skip
    memory = measure_memory(args, engines, ct2_dir) if args.memory else {}
    for name, mem in memory.items():
        counted = (
            "" if mem["weights_mib"] is None else f", weights counted {mem['weights_mib']:.0f} MiB"
        )
        print(f"memory {name}: RSS +{mem['rss_mib']:.0f} MiB{counted}")
    print(f"load average at the end: {load_average()}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"env": env, "args": vars(args), "results": results, "memory": memory}, f,
                      indent=2)  # fmt: skip
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
