"""Prompt lookup for translation (``attnkit translate --prompt-lookup K``) against greedy search.

    flock -x /tmp/attnkit-cpu.lock python bench/translate_lookup.py \\
        --checkpoint RUN/averaged --src test2016.de --lines 300 --rounds 2

Each source line is decoded alone, greedily, two ways on the stepper
``attnkit translate`` uses (the inference plan at one row, ``--precision``):
plain greedy search (``attnkit.decoding.greedy``) and greedy search with drafts
from the source (``attnkit.decoding.source_lookup``, ``--lookup K``), timed
round-robin per line (``bench.common.round_robin``), the median of
``--rounds`` per line summed. Printed: output tokens/s of each, the speed-up,
tokens per decoder pass, accepted drafts, and the lines whose outputs differ
(there should be none). For scale, greedy search over all lines in batches of
64 (what ``translate --greedy`` does with a file) is timed once: one line at a
time is for latency, a batch for throughput.
Not a timed test: figures depend on the machine and on what else runs on it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import environment, median, round_robin  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--src", type=Path, required=True, help="one source sentence per line")
    parser.add_argument("--lines", type=int, default=300, help="first N non-blank lines")
    parser.add_argument("--lookup", type=int, default=10, help="draft tokens K")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--precision", default="fp32")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from attnkit.checkpoints import load_model
    from attnkit.decoding.greedy import greedy_search
    from attnkit.decoding.source_lookup import lookup_greedy
    from attnkit.decoding.speculative import SpeculativeStats
    from attnkit.decoding.text import decode_ids, source_ids
    from attnkit.inference import CheckpointInfo, Machine, Options, make_plan, prepare

    loaded = load_model(args.checkpoint, "cpu")
    info = CheckpointInfo.of(loaded.model, loaded.family.kind)
    plan = make_plan(info, Machine.of(loaded.model), Options(precision=args.precision, rows=1))
    stepper = prepare(loaded, plan)
    model, tokenizer = loaded.model, loaded.tokenizer
    limit = model.config.max_len - 1
    texts = [t for t in args.src.read_text(encoding="utf-8").splitlines() if t.strip()]
    src = [source_ids(tokenizer, t, limit) for t in texts[: args.lines]]
    device = torch.device("cpu")
    print(json.dumps(environment(device)))
    print(f"# plan: {plan.describe()}")

    seconds = {"greedy": 0.0, "lookup": 0.0}
    stats = SpeculativeStats()
    tokens = differing = 0
    for ids in src:
        x = torch.tensor([ids])
        out: dict[str, list[int]] = {}
        one: list[SpeculativeStats] = []

        @torch.inference_mode()
        def plain(x: torch.Tensor = x, out: dict[str, list[int]] = out) -> None:
            out["greedy"] = greedy_search(stepper, x, max_len=limit).tokens[0]

        @torch.inference_mode()
        def looked_up(
            x: torch.Tensor = x, out: dict[str, list[int]] = out, one: list = one
        ) -> None:
            st = SpeculativeStats()
            out["lookup"] = lookup_greedy(model, x, num_tokens=args.lookup, max_len=limit,
                                          stepper=stepper, stats=st).tokens  # fmt: skip
            one[:] = [st]

        plain()  # warm-up
        times = round_robin({"greedy": plain, "lookup": looked_up}, args.rounds, device)
        for name in seconds:
            seconds[name] += median(times[name])
        differing += out["greedy"] != out["lookup"]
        tokens += len(out["greedy"]) + 1  # EOS is a decoded token too
        for field in ("tokens", "forwards", "rounds", "drafted", "accepted"):
            setattr(stats, field, getattr(stats, field) + getattr(one[0], field))

    began = time.perf_counter()
    with torch.inference_mode():
        decode_ids(stepper, src, beam=1, batch_size=64, max_len=limit)
    batched = time.perf_counter() - began
    g, lk = tokens / seconds["greedy"], tokens / seconds["lookup"]
    print(
        f"{len(src)} lines, {tokens} output tokens (EOS included); one line at a time: greedy "
        f"{g:.1f} tok/s ({len(src) / seconds['greedy']:.1f} lines/s), prompt lookup K="
        f"{args.lookup} {lk:.1f} tok/s = {lk / g:.2f}x, {stats.tokens_per_forward:.2f} "
        f"tokens/pass, {stats.accepted}/{stats.drafted} drafted accepted; outputs differing: "
        f"{differing}; batches of 64 (greedy): {len(src) / batched:.1f} lines/s"
    )


if __name__ == "__main__":
    main()
