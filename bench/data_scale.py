"""Data at scale (issue 24): preparation speed, time to first step, peak memory, tokens/s.

The corpus is Multi30k's ``train.*`` repeated ``--repeat`` times (150: 4.35M
pairs, ~570 MB; 1500: 43.5M pairs, ~5.7 GB), written to ``--work`` (outside
the repository; ``df -h`` it first). Every part is one measurement: run it
holding the CPU lock (``flock -x /tmp/attnkit-cpu.lock python bench/data_scale.py ...``).

Parts (``--part``):

* ``build``: write the repeated corpus (and Multi30k's valid split) once.
* ``prepare``: ``attnkit prepare`` on it in a subprocess, end to end (tokenizer
  on a 1M-pair sample, then every pair encoded): seconds and peak RSS.
* ``encode``: preparation throughput on the first ``--pairs`` pairs, side by
  side with the same tokenizer and cores: (1) ``tokenizers``' ``encode_batch``
  alone on texts already in memory (the issue's floor), and its
  ``encode_batch_fast`` (no character offsets: the call attnkit makes), (2)
  attnkit's encode stage (files -> memory-mapped ids, what ``prepare`` does
  after the tokenizer), (3) HF ``datasets``: text files into Arrow
  (``Dataset.from_generator``), then ``map(batched=True)`` writing the ids to
  Arrow, if ``datasets`` is installed (nothing is downloaded). Pairs per second.
* ``first-step``: ``attnkit train`` (subprocess) until its first training
  step is logged: seconds to step 1 and step 3, and the process's peak
  resident memory (``ru_maxrss`` from ``wait4``); ``--loading`` picks the
  path, ``--tree DIR`` runs another checkout (the old in-memory path).
* ``throughput``: training tokens/s on Multi30k itself, ``--rounds`` rounds
  of ``--steps`` steps per path, alternating (prepared, memory, and
  ``--tree`` if given); the median of the logged tokens/s after the first record.

Each part prints one JSON line (with the CPU, commit, date and load) and a table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import REPO, cpu_name, format_table, load_average

# The shared data beside the checkout (a worktree sits one level deeper), or $ATTNKIT_DATA.
_DATA = [Path(os.environ["ATTNKIT_DATA"])] if os.environ.get("ATTNKIT_DATA") else []
_DATA += [REPO.parent / "shared" / "data", REPO.parents[1] / "shared" / "data"]
MULTI30K = next((d for d in _DATA if d.is_dir()), _DATA[0]) / "multi30k"
CONFIG = REPO / "configs" / "multi30k_de_en_cpu.yaml"
SHORT_RUN = ["train.max_minutes=null", "train.decay_to_budget=false",
             "train.warmup_fraction=null", "train.save_every=0", "train.eval_every=100000",
             "train.log_every=1", "train.save_fraction=null"]  # fmt: skip


def header() -> dict[str, str]:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                            capture_output=True, text=True).stdout.strip()  # fmt: skip
    return {"cpu": cpu_name(), "commit": commit, "load": load_average(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}  # fmt: skip


def corpus_dir(args: argparse.Namespace) -> Path:
    return Path(args.work) / f"multi30k_x{args.repeat}"


# -- build ---------------------------------------------------------------------------------


def build(args: argparse.Namespace) -> dict:
    out = corpus_dir(args)
    out.mkdir(parents=True, exist_ok=True)
    for lang in ("de", "en"):
        target = out / f"train.{lang}"
        block = (MULTI30K / f"train.{lang}").read_bytes()
        if not target.exists() or target.stat().st_size != len(block) * args.repeat:
            with open(target, "wb") as f:
                for _ in range(args.repeat):
                    f.write(block)
        shutil.copy(MULTI30K / f"valid.{lang}", out / f"valid.{lang}")
    pairs = (MULTI30K / "train.de").read_bytes().count(b"\n") * args.repeat
    size = sum((out / f"train.{x}").stat().st_size for x in ("de", "en"))
    return {"part": "build", "dir": str(out), "pairs": pairs, "bytes": size}


# -- subprocess helpers ---------------------------------------------------------------------


def run_measured(command: list[str], env: dict[str, str], watch: Path | None = None) -> dict:
    """Run ``command``; wall seconds, peak RSS (MiB) and, when ``watch`` (a metrics.jsonl)
    is given, the seconds until its 1st and 3rd training records appear."""
    log = tempfile.TemporaryFile(mode="w+", encoding="utf-8")
    start = time.perf_counter()
    proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    seen: dict[int, float] = {}
    while True:
        if watch is not None and watch.exists():
            steps = [json.loads(x) for x in watch.read_text().splitlines() if '"train"' in x]
            for record in steps:
                seen.setdefault(record["step"], time.perf_counter() - start)
        done, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.05)
    proc.returncode = os.waitstatus_to_exitcode(status)
    log.seek(0)
    text = log.read()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({proc.returncode}):\n{text[-3000:]}")
    return {"seconds": round(time.perf_counter() - start, 2),
            "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),  # Linux: KiB
            "first_step_s": round(seen[1], 2) if 1 in seen else None,
            "third_step_s": round(seen[3], 2) if 3 in seen else None,
            "output": text}  # fmt: skip


def attnkit(tree: Path, *args: str) -> list[str]:
    return [sys.executable, "-c", "import sys; from attnkit.cli.main import main; "
            "sys.exit(main(sys.argv[1:]))", *args]  # fmt: skip


def env_for(tree: Path, cache: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tree), "ATTNKIT_CACHE_DIR": str(cache)}


# -- prepare / first step -----------------------------------------------------------------


def prepare(args: argparse.Namespace) -> dict:
    data = corpus_dir(args)
    command = attnkit(REPO, "prepare", "--config", str(CONFIG), "--set", f"data.dir={data}")
    result = run_measured(command, env_for(REPO, Path(args.cache)))
    summary = json.loads(result["output"].strip().splitlines()[-1])
    lines = [x for x in result.pop("output").splitlines() if not x.startswith("{")]
    return {"part": "prepare", **result, "pairs": summary.get("pairs"), "log": lines}


def first_step(args: argparse.Namespace) -> dict:
    tree = Path(args.tree) if args.tree else REPO
    data = corpus_dir(args)
    out = Path(tempfile.mkdtemp(prefix="first_step_", dir=args.work))
    sets = [f"data.dir={data}", "train.max_steps=3", *SHORT_RUN]
    if args.tree is None:
        sets.append(f"data.loading={args.loading}")
    command = attnkit(tree, "train", "--config", str(tree / "configs" / CONFIG.name), "--out",
                      str(out), "--overwrite", "--no-progress",
                      *[x for s in sets for x in ("--set", s)])  # fmt: skip
    try:
        result = run_measured(command, env_for(tree, Path(args.cache)), out / "metrics.jsonl")
    finally:
        shutil.rmtree(out, ignore_errors=True)
    lines = [x for x in result.pop("output").splitlines() if not x.startswith("{")]
    path = "old tree " + args.tree if args.tree else f"data.loading={args.loading}"
    return {"part": "first-step", "path": path, **result, "log": lines}


# -- encode: attnkit vs the anchors ---------------------------------------------------------


def _subset(args: argparse.Namespace) -> Path:
    """The first ``--pairs`` pairs of the corpus as files of their own."""
    sub = Path(args.work) / f"subset_{args.pairs}"
    sub.mkdir(parents=True, exist_ok=True)
    for lang in ("de", "en"):
        target = sub / f"train.{lang}"
        if not target.exists():
            with open(corpus_dir(args) / f"train.{lang}", encoding="utf-8") as src:
                target.write_text("".join(next(src) for _ in range(args.pairs)), encoding="utf-8")
    return sub


def encode(args: argparse.Namespace) -> dict:
    sys.path.insert(0, str(REPO))
    from attnkit.data.formats import pair_inputs
    from attnkit.data.prepared import pair_tokenizer, prepare_pairs

    class Settings:
        kind, vocab_size, sample_size = "bpe", 8000, 1_000_000

    sub = _subset(args)
    inputs = pair_inputs(sub, "train", "de", "en")
    work = Path(tempfile.mkdtemp(prefix="encode_", dir=args.work))
    tok = pair_tokenizer(inputs, Settings(), skip_empty=False, root=work / "tok")
    hf = tok._hf  # type: ignore[attr-defined]
    src = (sub / "train.de").read_text(encoding="utf-8").split("\n")[:-1]
    tgt = (sub / "train.en").read_text(encoding="utf-8").split("\n")[:-1]
    n = len(src)
    chunk = 50_000
    results: dict[str, list[float]] = {"encode_batch": [], "encode_batch_fast": [],
                                       "attnkit": [], "datasets_map": [],
                                       "datasets_total": []}  # fmt: skip

    def floor(encode) -> None:  # texts already in memory, ids never read
        for i in range(0, n, chunk):
            encode(src[i : i + chunk] + tgt[i : i + chunk], add_special_tokens=False)

    def ours(r: int) -> None:
        prepare_pairs(inputs, tok, skip_empty=False, root=work / f"ours{r}")

    have_datasets = True
    try:
        import datasets  # noqa: F401
    except ImportError:
        have_datasets = False

    def theirs(r: int) -> tuple[float, float]:
        from datasets import Dataset, disable_progress_bars

        disable_progress_bars()

        def pairs():
            with (
                open(sub / "train.de", encoding="utf-8") as a,
                open(sub / "train.en", encoding="utf-8") as b,
            ):
                for s, t in zip(a, b):
                    yield {"src": s.rstrip("\n"), "tgt": t.rstrip("\n")}

        start = time.perf_counter()
        ds = Dataset.from_generator(pairs, cache_dir=str(work / f"ds{r}"))

        def tokenize(batch):
            enc = hf.encode_batch(batch["src"] + batch["tgt"], add_special_tokens=False)
            k = len(batch["src"])
            return {"src_ids": [e.ids for e in enc[:k]], "tgt_ids": [e.ids for e in enc[k:]]}

        mapped = time.perf_counter()
        ds.map(tokenize, batched=True, remove_columns=["src", "tgt"],
               cache_file_name=str(work / f"ds{r}" / "ids.arrow"))  # fmt: skip
        end = time.perf_counter()
        return end - mapped, end - start

    for r in range(args.rounds):  # alternating, so load changes hit every contender
        t = time.perf_counter()
        floor(hf.encode_batch)
        results["encode_batch"].append(time.perf_counter() - t)
        t = time.perf_counter()  # without character offsets (what attnkit calls)
        floor(hf.encode_batch_fast)
        results["encode_batch_fast"].append(time.perf_counter() - t)
        t = time.perf_counter()
        ours(r)
        results["attnkit"].append(time.perf_counter() - t)
        if have_datasets:
            m, total = theirs(r)
            results["datasets_map"].append(m)
            results["datasets_total"].append(total)
    shutil.rmtree(work, ignore_errors=True)
    rates = {k: round(n / min(v)) for k, v in results.items() if v}  # best of the rounds
    return {"part": "encode", "pairs": n, "pairs_per_s": rates,
            "seconds": {k: [round(x, 2) for x in v] for k, v in results.items()},
            "attnkit_vs_encode_batch": round(rates["attnkit"] / rates["encode_batch"], 3),
            "attnkit_vs_encode_batch_fast": round(rates["attnkit"] / rates["encode_batch_fast"], 3),
            "attnkit_vs_datasets_map": round(rates["attnkit"] / rates["datasets_map"], 3)
            if have_datasets else None}  # fmt: skip


# -- training throughput ----------------------------------------------------------------------


def throughput(args: argparse.Namespace) -> dict:
    paths = [("prepared", REPO, "prepared"), ("memory", REPO, "memory")]
    if args.tree:
        paths.append(("old tree", Path(args.tree), None))
    rates: dict[str, list[float]] = {name: [] for name, _, _ in paths}
    losses: dict[str, list[list[float]]] = {name: [] for name, _, _ in paths}
    log_every = max(1, args.steps // 5)
    for _ in range(args.rounds):
        for name, tree, loading in paths:
            out = Path(tempfile.mkdtemp(prefix="tps_", dir=args.work))
            sets = [f"data.dir={MULTI30K}", f"train.max_steps={args.steps}", *SHORT_RUN,
                    f"train.log_every={log_every}"]  # fmt: skip
            if loading:
                sets.append(f"data.loading={loading}")
            command = attnkit(tree, "train", "--config", str(tree / "configs" / CONFIG.name),
                              "--out", str(out), "--overwrite", "--no-progress",
                              *[x for s in sets for x in ("--set", s)])  # fmt: skip
            run_measured(command, env_for(tree, Path(args.cache)))
            records = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
            train = [r for r in records if r["split"] == "train"]
            rates[name] += [r["tokens_per_s"] for r in train[1:]]
            losses[name].append([r["loss"] for r in train])
            shutil.rmtree(out, ignore_errors=True)
    medians = {k: round(statistics.median(v), 1) for k, v in rates.items()}
    # The same seed and data: every path must log the very same losses, step for step.
    runs = [loss for name in losses for loss in losses[name]]
    return {"part": "throughput", "steps": args.steps, "rounds": args.rounds,
            "identical_losses": all(loss == runs[0] for loss in runs),
            "tokens_per_s": medians, "records": {k: len(v) for k, v in rates.items()},
            "prepared_vs_memory": round(medians["prepared"] / medians["memory"], 4),
            "prepared_vs_old": round(medians["prepared"] / medians["old tree"], 4)
            if args.tree else None}  # fmt: skip


PARTS = {"build": build, "prepare": prepare, "encode": encode, "first-step": first_step,
         "throughput": throughput}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--part", choices=PARTS, required=True)
    p.add_argument(
        "--work",
        default="/work/scratch/data_scale",
        help="folder for the corpus and runs, outside the repo (default %(default)s)",
    )
    p.add_argument("--cache", help="ATTNKIT_CACHE_DIR for the runs (default WORK/cache)")
    p.add_argument("--repeat", type=int, default=150, help="Multi30k train x N (default 150)")
    p.add_argument("--loading", default="prepared", choices=("prepared", "memory", "streaming"))
    p.add_argument("--tree", help="another checkout to run (first-step, throughput)")
    p.add_argument("--pairs", type=int, default=1_000_000, help="encode: pairs (default 1M)")
    p.add_argument("--rounds", type=int, default=2, help="encode/throughput rounds")
    p.add_argument("--steps", type=int, default=40, help="throughput: steps per run")
    args = p.parse_args()
    args.cache = args.cache or str(Path(args.work) / "cache")
    if Path(args.work).resolve().is_relative_to(REPO):
        raise SystemExit(f"--work {args.work}: keep the corpus outside the repository")
    result = {**header(), "repeat": args.repeat, **PARTS[args.part](args)}
    print(json.dumps(result))
    flat = [[k, json.dumps(v) if isinstance(v, dict | list) else str(v)]
            for k, v in result.items() if k != "log"]  # fmt: skip
    print(format_table(["field", "value"], flat))


if __name__ == "__main__":
    main()
