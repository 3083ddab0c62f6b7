"""Decode with attnkit (reference and fast paths) and HF ``generate``: same weights, inputs, length.

Every decoder runs the SAME weights (attnkit's model copied into a
``MarianMTModel`` by ``attnkit.interop.hf.marian``), on the same batch of
random source sentences, forced to exactly ``new`` output tokens (EOS
suppressed until then: ``MinLength`` for attnkit, ``min_new_tokens`` for HF;
the length cap ends every output there). Decoders:

* ``attnkit_ref``      -- the model itself (the reference path): the growing KV cache, and
  the "all finished?" test every step (one host-device sync per step);
* ``attnkit_fast``     -- the static KV cache, beams reordered without moving
  the source side, the finished-test every 8 steps on GPU (1 on CPU);
* ``attnkit_compiled`` -- ``attnkit_fast`` compiled (``StaticCacheStepper(model, compile=True)``)
  (``torch.compile(mode="reduce-overhead")``: CUDA graphs; inductor on CPU).
  Default: on with CUDA, off on CPU (``--compile`` / ``--no-compile``);
* ``hf``               -- ``MarianMTModel.generate`` (sdpa), when transformers is installed;
* ``attnkit_fast_sync1`` (with ``--sync-row``) -- ``attnkit_fast`` with the
  finished-test every step, to isolate what ``check_every`` buys.

Searches: greedy and beam 4 (``--beams``). Prints a Markdown table
(sentences/s, ms per step, TFLOP/s, MFU, peak memory, ratios to
``attnkit_ref`` and ``hf``) and token agreement: the fast paths against the
reference path (should be 100%) and attnkit's greedy outputs against HF's.
TFLOP/s use the reference path's FLOPs for every row of a search (counted
once with ``FlopCounterMode``: the same model and outputs, so the same work).
Timing is round-robin (``common.round_robin``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
from collections.abc import Callable

import torch

# common also puts the repo on sys.path, so this runs from a checkout without installing.
from common import (
    PAD,
    count_flops,
    environment,
    format_table,
    load_average,
    median,
    peak_flops,
    round_robin,
    sync,
)

from attnkit.decoding import StaticCacheStepper, Stepper, beam_search, greedy_search
from attnkit.decoding.constraints import MinLength
from attnkit.models import EncoderDecoder, TransformerConfig

# name -> (attnkit preset, sentences, source length, new tokens, vocabulary)
SHAPES = {
    "small": ("small", 32, 16, 20, 8000),  # CPU-sized
    "base": ("base", 512, 32, 40, 32000),  # issue #6's HF generate reference
    "big": ("big", 512, 32, 40, 32000),
}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--shape", choices=SHAPES, help="default: base on CUDA, small on CPU")
    p.add_argument("--sentences", type=int, help="override the shape's number of sentences")
    p.add_argument("--beams", default="1,4", help="comma-separated beam sizes (1 = greedy)")
    p.add_argument("--repeats", type=int, default=3, help="timed rounds (median)")
    p.add_argument("--warmup", type=int, help="untimed runs per decoder (default 1; 2 compiled)")
    p.add_argument("--device", default="auto", help="cpu, cuda (default: auto)")
    p.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                   help="add attnkit_compiled (default: on CUDA only)")  # fmt: skip
    p.add_argument("--no-ref", action="store_true", help="skip attnkit_ref")
    p.add_argument("--sync-row", action="store_true",
                   help="add attnkit_fast_sync1: the fast path with check_every=1")  # fmt: skip
    p.add_argument("--no-hf", action="store_true", help="skip HF generate")
    p.add_argument("--no-flops", action="store_true", help="skip FLOP counting and MFU")
    p.add_argument("--json", help="also write the figures to this file")
    return p.parse_args()


def tokens_of(out) -> list[list[int]]:
    """attnkit's ``DecodeResult`` or HF's ``(n, 1 + new)`` ids -> lists of output ids."""
    if isinstance(out, torch.Tensor):
        return out[:, 1:].tolist()  # drop the decoder start token
    return out.tokens


def agreement(a: list[list[int]], b: list[list[int]]) -> float:
    return sum(x == y for x, y in zip(a, b)) / len(a)


def main() -> None:
    args = parse_args()
    device = torch.device(
        ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    )
    cuda = device.type == "cuda"
    shape = args.shape or ("base" if cuda else "small")
    preset, n, s, new, vocab = SHAPES[shape]
    n = args.sentences or n
    dtype = torch.bfloat16 if cuda else torch.float32
    beams = [int(b) for b in args.beams.split(",")]
    use_compile = cuda if args.compile is None else args.compile
    warmup = args.warmup if args.warmup is not None else (2 if use_compile else 1)

    cfg = TransformerConfig.from_preset(preset, src_vocab_size=vocab, tgt_vocab_size=vocab,
                                        dropout=0.0)  # fmt: skip
    torch.manual_seed(0)
    model = EncoderDecoder(cfg).eval()
    g = torch.Generator().manual_seed(0)
    src = torch.randint(3, vocab, (n, s), generator=g)
    for row in range(0, n, 10):  # some padded sources, as in real batches
        src[row, s // 2 + row % (s // 2) :] = PAD
    src = src.to(device)

    hf = None
    if not args.no_hf and importlib.util.find_spec("transformers"):
        from attnkit.interop.hf.marian import to_hf_marian

        hf = to_hf_marian(model).to(device, dtype).eval()
        hf.generation_config.forced_eos_token_id = None
    model.to(device, dtype)
    compiled = StaticCacheStepper(model, compile=True) if use_compile else None

    def ours(m: Stepper, k: int, check: int | None = 1) -> Callable[[], object]:
        """``check``: the finished-test interval (1 for the reference; None: the default)."""
        forced = MinLength(m, new)  # EOS forbidden until `new` tokens; max_len ends them there

        def run():
            if k == 1:
                return greedy_search(forced, src, max_len=new, check_every=check)
            return beam_search(forced, src, beam_size=k, alpha=0.6, max_len=new, check_every=check)

        return run

    def theirs(k: int) -> Callable[[], object]:
        mask = src != PAD
        return lambda: hf.generate(
            input_ids=src, attention_mask=mask, num_beams=k, do_sample=False,
            max_new_tokens=new, min_new_tokens=new, early_stopping=False,
        )  # fmt: skip

    decoders: dict[tuple[str, int], Callable[[], object]] = {}
    for k in beams:
        if not args.no_ref:
            decoders[("attnkit_ref", k)] = ours(model, k)
        decoders[("attnkit_fast", k)] = ours(StaticCacheStepper(model), k, check=None)
        if args.sync_row:
            decoders[("attnkit_fast_sync1", k)] = ours(StaticCacheStepper(model), k, check=1)
        if compiled is not None:
            decoders[("attnkit_compiled", k)] = ours(compiled, k, check=None)
        if hf is not None:
            decoders[("hf", k)] = theirs(k)

    env = environment(device)
    for key, value in env.items():
        print(f"{key}: {value}")
    print(f"shape: {shape} ({preset} preset, vocab {vocab}), {n} sentences x {s} source "
          f"tokens, forced to {new} new tokens, {str(dtype).replace('torch.', '')}, "
          f"warmup {warmup}, repeats {args.repeats}")  # fmt: skip
    peak, peak_how = (None, "skipped") if args.no_flops else peak_flops(device)
    if peak:
        print(f"measured peak: {peak / 1e12:.2f} TFLOP/s ({peak_how})")

    results, outputs, flops, peak_mib = [], {}, {}, {}
    with torch.inference_mode():
        for (name, k), run in decoders.items():
            for _ in range(warmup):  # compiles, records CUDA graphs, fills the pools
                outputs[(name, k)] = tokens_of(run())
            if cuda:
                sync(device)
                before = torch.cuda.memory_allocated(device)
                torch.cuda.reset_peak_memory_stats(device)
                run()
                sync(device)
                peak_mib[(name, k)] = (torch.cuda.max_memory_allocated(device) - before) / 2**20
        if not args.no_flops:
            for k in beams:
                flops[k] = count_flops(ours(model, k))  # the plain stepper: its FLOPs are the work
        times = round_robin(decoders, args.repeats, device)

    for (name, k), ts in times.items():
        t = median(ts)
        f = flops.get(k)
        results.append({
            "decoder": name, "beam": k, "seconds": t, "seconds_all": ts,
            "sentences_per_s": n / t, "ms_per_step": 1000 * t / new,
            "tflops": f / t / 1e12 if f else None, "mfu": f / t / peak if f and peak else None,
            "peak_mib": peak_mib.get((name, k)),
        })  # fmt: skip

    def speed(name: str, k: int) -> float | None:
        found = [r["sentences_per_s"] for r in results if (r["decoder"], r["beam"]) == (name, k)]
        return found[0] if found else None

    rows = []
    for r in results:
        k = r["beam"]
        ref, them = speed("attnkit_ref", k), speed("hf", k)
        r["vs_attnkit_ref"] = r["sentences_per_s"] / ref if ref else None
        r["vs_hf"] = r["sentences_per_s"] / them if them else None
        rows.append([r["decoder"], "greedy" if k == 1 else f"beam {k}",
                     f"{r['sentences_per_s']:,.1f}", f"{r['ms_per_step']:.2f}",
                     "n/a" if r["tflops"] is None else f"{r['tflops']:.3f}",
                     "n/a" if r["mfu"] is None else f"{100 * r['mfu']:.2f}%",
                     "n/a" if r["peak_mib"] is None else f"{r['peak_mib']:,.0f}",
                     "-" if r["vs_attnkit_ref"] is None else f"{r['vs_attnkit_ref']:.2f}x",
                     "-" if r["vs_hf"] is None else f"{r['vs_hf']:.2f}x"])  # fmt: skip
    print()
    print(format_table(["decoder", "search", "sentences/s", "ms/step", "TFLOP/s", "MFU",
                        "peak MiB", "vs attnkit_ref", "vs hf"], rows))  # fmt: skip

    agree = {}
    for (name, k), out in outputs.items():
        if name != "attnkit_ref" and ("attnkit_ref", k) in outputs:
            search = "greedy" if k == 1 else f"beam {k}"
            agree[f"{name} vs attnkit_ref, {search}"] = agreement(out, outputs[("attnkit_ref", k)])
    if ("hf", 1) in outputs and ("attnkit_fast", 1) in outputs:
        agree["attnkit_fast vs hf, greedy"] = agreement(outputs[("attnkit_fast", 1)],
                                                       outputs[("hf", 1)])  # fmt: skip
    print()
    for what, frac in agree.items():
        print(f"identical outputs, {what}: {frac:.1%} of {n} sentences")
    print(f"load average at the end: {load_average()}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"env": env, "shape": shape, "sentences": n, "new_tokens": new,
                       "peak_flops": peak, "peak_how": peak_how, "agreement": agree,
                       "results": results}, f, indent=2)  # fmt: skip
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
