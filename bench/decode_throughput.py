"""Decode with attnkit and HF ``generate`` on the same model, inputs and forced length.

Both decoders run the SAME weights (attnkit's model copied into a
``MarianMTModel`` by ``attnkit.interop.hf_marian``), on the same batch of
random source sentences, forced to exactly ``--new-tokens`` output tokens
(EOS suppressed until then: ``MinLength`` for attnkit, ``min_new_tokens`` for
HF). Greedy and beam search are timed; the greedy outputs are also compared
token for token, since with equal weights they should agree.

Prints a Markdown table (sentences/s, ms per decoding step, peak memory, ratio
to attnkit) with the environment header for docs/results.md.
"""

from __future__ import annotations

import argparse
import importlib.util
import json

import torch

# common also puts the repo on sys.path, so this runs from a checkout without installing.
from common import PAD, environment, format_table, load_average, median, time_step

from attnkit.decoding import beam_search, greedy_search
from attnkit.decoding.constraints import MinLength
from attnkit.models import EncoderDecoder, TransformerConfig

# name -> (attnkit preset, sentences, source length, new tokens, vocabulary)
SHAPES = {
    "base": ("base", 512, 32, 40, 32000),  # issue #6's HF generate reference; for a GPU
    "small": ("small", 32, 16, 20, 8000),  # CPU-sized
}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--shape", choices=SHAPES, help="default: base on CUDA, small on CPU")
    p.add_argument("--beams", default="1,4", help="comma-separated beam sizes (1 = greedy)")
    p.add_argument("--repeats", type=int, default=3, help="timed runs per decoder (median)")
    p.add_argument("--device", default="auto", help="cpu, cuda (default: auto)")
    p.add_argument("--no-hf", action="store_true", help="skip HF generate")
    p.add_argument("--json", help="also write the figures to this file")
    return p.parse_args()


def main() -> None:
    args = parse_args()
    device = torch.device(
        ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    )
    shape = args.shape or ("base" if device.type == "cuda" else "small")
    preset, n, s, new, vocab = SHAPES[shape]
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    beams = [int(b) for b in args.beams.split(",")]

    cfg = TransformerConfig.from_preset(preset, src_vocab_size=vocab, tgt_vocab_size=vocab,
                                        dropout=0.0)  # fmt: skip
    torch.manual_seed(0)
    model = EncoderDecoder(cfg).to(device).eval()
    g = torch.Generator().manual_seed(0)
    src = torch.randint(3, vocab, (n, s), generator=g)
    for row in range(0, n, 10):  # some padded sources, as in real batches
        src[row, s // 2 + row % (s // 2) :] = PAD
    src = src.to(device)

    decoders = {}
    forced = MinLength(model.to(dtype), new)

    def ours(k: int):
        if k == 1:
            return lambda: greedy_search(forced, src, max_len=new)
        return lambda: beam_search(forced, src, beam_size=k, alpha=0.6, max_len=new)

    for k in beams:
        decoders[("attnkit", k)] = ours(k)

    hf = None
    if not args.no_hf and importlib.util.find_spec("transformers"):
        from attnkit.interop.hf_marian import to_hf_marian

        hf = to_hf_marian(model.float()).to(dtype).eval()
        model.to(dtype)
        hf.generation_config.forced_eos_token_id = None
        mask = src != PAD

        def theirs(k: int):
            return lambda: hf.generate(
                input_ids=src, attention_mask=mask, num_beams=k, do_sample=False,
                max_new_tokens=new, min_new_tokens=new, early_stopping=False,
            )  # fmt: skip

        for k in beams:
            decoders[("hf", k)] = theirs(k)

    env = environment(device)
    for key, value in env.items():
        print(f"{key}: {value}")
    print(f"shape: {shape} ({preset} preset, vocab {vocab}), {n} sentences x {s} source "
          f"tokens, forced to {new} new tokens, {str(dtype).replace('torch.', '')}")  # fmt: skip

    results = []
    with torch.inference_mode():
        agree = None
        if hf is not None and 1 in beams:
            a = decoders[("attnkit", 1)]().tokens
            b = decoders[("hf", 1)]()[:, 1:].tolist()  # drop the decoder start token
            agree = sum(x == y for x, y in zip(a, b)) / n
        for (name, k), run in decoders.items():
            run()  # warm-up
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            times = [time_step(run, device) for _ in range(args.repeats)]
            t = median(times)
            peak = (
                torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None
            )
            results.append({"decoder": name, "beam": k, "seconds": t, "sentences_per_s": n / t,
                            "ms_per_step": 1000 * t / new, "peak_mib": peak})  # fmt: skip

    rows = []
    for r in results:
        ref = next(x for x in results if x["decoder"] == "attnkit" and x["beam"] == r["beam"])
        r["vs_attnkit"] = r["sentences_per_s"] / ref["sentences_per_s"]
        rows.append([r["decoder"], "greedy" if r["beam"] == 1 else f"beam {r['beam']}",
                     f"{r['sentences_per_s']:,.1f}", f"{r['ms_per_step']:.2f}",
                     "n/a" if r["peak_mib"] is None else f"{r['peak_mib']:,.0f}",
                     f"{r['vs_attnkit']:.2f}x"])  # fmt: skip
    print()
    print(format_table(["decoder", "search", "sentences/s", "ms/step", "peak MiB",
                        "speed vs attnkit"], rows))  # fmt: skip
    if agree is not None:
        print(f"\ngreedy outputs identical to HF generate: {agree:.1%} of {n} sentences")
    print(f"load average at the end: {load_average()}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"env": env, "shape": shape, "greedy_agreement": agree,
                       "results": results}, f, indent=2)  # fmt: skip


if __name__ == "__main__":
    main()
