"""Issue 12: BLEU of a trained checkpoint decoded in fp32, bf16 and int8 (``attnkit.quantize``).

Loads an ``attnkit train`` checkpoint, translates a test set with today's
decoding (``model``: ``EncoderDecoder`` fp32, the reference) and with
``CpuStepper`` over ``quantize_model(model, p)`` for each precision, and
prints corpus BLEU (sacreBLEU 13a), the difference to the reference,
sentences/s (one pass each; the machine may be shared, so the speed column
is indicative) and the share of outputs identical to the reference.

Run: ``python bench/quant_bleu.py --checkpoint runs/de_en --src test2016.de --ref test2016.en``.
"""

from __future__ import annotations

import argparse
import copy
import json
import time

import torch
from common import format_table, load_average  # bench/ on sys.path; puts the repo on it too

from attnkit.decoding.text import translate_texts
from attnkit.evaluation.bleu import corpus_scores
from attnkit.quantize import CpuStepper, quantize_model
from attnkit.training.loading import load_translation_model


class _AsModel:
    """Lets ``translate_texts`` (which asks a model for ``config``/``eval``) drive a stepper."""

    def __init__(self, stepper: CpuStepper) -> None:
        self.stepper, self.config, self.training = stepper, stepper.model.config, False
        self.pad_id, self.bos_id, self.eos_id = stepper.pad_id, stepper.bos_id, stepper.eos_id
        self.accepts_max_steps = True
        self.start, self.step = stepper.start, stepper.step

    def eval(self) -> _AsModel:
        return self

    def train(self, mode: bool = True) -> _AsModel:
        return self

    def parameters(self):
        return self.stepper.model.parameters()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--src", required=True)
    p.add_argument("--ref", required=True)
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--limit", type=int, help="first N sentences only")
    p.add_argument("--precisions", default="fp32,bf16,int8")
    p.add_argument("--json")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    model, tokenizer = load_translation_model(args.checkpoint, "cpu")
    srcs = open(args.src, encoding="utf-8").read().splitlines()[: args.limit]
    refs = open(args.ref, encoding="utf-8").read().splitlines()[: args.limit]
    decoders = {"model fp32 (reference)": model}
    for precision in args.precisions.split(","):
        stepper = CpuStepper(quantize_model(copy.deepcopy(model), precision))
        decoders[f"CpuStepper {precision}"] = _AsModel(stepper)
    rows, results, ref_hyps = [], [], None
    with torch.inference_mode():
        for name, dec in decoders.items():
            t0 = time.perf_counter()
            hyps = translate_texts(dec, tokenizer, srcs, beam=args.beam, batch_size=64)
            seconds = time.perf_counter() - t0
            scores = corpus_scores(hyps, refs)
            ref_hyps = ref_hyps or hyps
            same = sum(a == b for a, b in zip(hyps, ref_hyps)) / len(hyps)
            bleu0 = results[0]["bleu"] if results else scores["bleu"]
            results.append({"decoder": name, "bleu": scores["bleu"], "chrf": scores["chrf"],
                            "sentences_per_s": len(srcs) / seconds, "identical": same})  # fmt: skip
            rows.append([name, f"{scores['bleu']:.2f}", f"{scores['bleu'] - bleu0:+.2f}",
                         f"{scores['chrf']:.2f}", f"{len(srcs) / seconds:.1f}",
                         f"{same:.1%}"])  # fmt: skip
    print(f"{args.checkpoint}: {len(srcs)} sentences, beam {args.beam}, {args.threads} threads, "
          f"{scores['bleu_signature']}")  # fmt: skip
    print(format_table(["decoder", "BLEU", "vs ref", "chrF", "sent/s", "same output"], rows))
    print(f"load average at the end: {load_average()}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": results}, f, indent=2)


if __name__ == "__main__":
    main()
