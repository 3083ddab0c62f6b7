"""One benchmark, two checkouts, alternately in one run: did a change make any row slower?

Runs ``bench/<script>`` of the ``--before`` checkout and of the ``--after``
checkout in turn (before, after, after, before, ... : ABBA pairs, so a drift
in the machine's speed hits both alike), each as its own process on its own
code (``PYTHONPATH`` and the working directory are that checkout), and reads
the ``--json`` each run writes. For every row of the benchmark it prints the
median of each side and their ratio.

Rows understood: ``bench/cpu_decode.py`` (sentences/s per engine and search),
``bench/real_decode.py`` (sentences/s per engine) and ``bench/cpu_generate.py``
(decode tokens/s and prefill ms per engine).
Hold the CPU lock around the whole comparison:

    flock -x /tmp/attnkit-cpu.lock python bench/before_after.py \\
        --before /tmp/main-worktree --after . --pairs 2 --out before_after.json \\
        -- cpu_decode.py --engines attnkit_reference,attnkit_fp32 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from common import cpu_features, cpu_name, format_table, load_average

Rows = dict[tuple[str, str], float]  # (row, metric) -> value; metric "x/s" higher is better


def rows_of(payload: dict[str, Any]) -> Rows:
    """The measured figures of one run's JSON, by row and metric."""
    rows: Rows = {}
    if "engines" in payload:  # real_decode.py: {engine: {sentences_per_s, bleu, ...}}
        for engine, r in payload["engines"].items():
            rows[(f"{engine}, beam {payload['beam']}", "sent/s")] = r["sentences_per_s"]
        return rows
    for r in payload["results"]:
        if "sentences_per_s" in r:  # cpu_decode.py
            search = "greedy" if r["beam"] == 1 else f"beam {r['beam']}"
            rows[(f"{r['engine']}, {search}", "sent/s")] = r["sentences_per_s"]
        elif "decode_tok_s" in r:  # cpu_generate.py
            rows[(r["engine"], "decode tok/s")] = r["decode_tok_s"]
            rows[(r["engine"], "prefill ms")] = r["prefill_ms"]
    if not rows:
        raise SystemExit("before_after: no rows this script knows in the JSON")
    return rows


def compare(samples: dict[str, list[Rows]]) -> tuple[list[list[str]], list[dict[str, Any]]]:
    """Table rows and records: each row's medians and ``after speed / before`` (> 1: faster;
    for a time such as ``prefill ms`` the inverse ratio of the times)."""
    table, records = [], []
    for key in samples["after"][0]:
        before = [s[key] for s in samples["before"] if key in s]
        after = [s[key] for s in samples["after"] if key in s]
        if not before:
            continue
        mb, ma = statistics.median(before), statistics.median(after)
        ratio = ma / mb if key[1].endswith("/s") else mb / ma
        spread = " ".join(f"{x:.1f}" for x in before), " ".join(f"{x:.1f}" for x in after)
        table.append([key[0], key[1], f"{mb:.1f}", f"{ma:.1f}", f"{ratio:.3f}", *spread])
        records.append({"row": key[0], "metric": key[1], "before": before, "after": after,
                        "speed_ratio": ratio})  # fmt: skip
    return table, records


def commit(tree: Path) -> str:
    out = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True)  # fmt: skip
    dirty = subprocess.run(["git", "-C", str(tree), "status", "--porcelain", "attnkit", "bench"],
                           capture_output=True, text=True).stdout.strip()  # fmt: skip
    return out.stdout.strip() + (" (+ uncommitted changes)" if dirty else "")


def run_once(tree: Path, script: str, args: list[str], log: Path) -> Rows:
    """One run of ``tree``'s ``bench/<script>``; its output is appended to ``log``."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.json"
        env = {**os.environ, "PYTHONPATH": str(tree)}
        cmd = [sys.executable, str(tree / "bench" / script), *args, "--json", str(out)]
        with log.open("a") as f:
            f.write(f"\n### {tree} ({commit(tree)}): {' '.join(cmd)}\n")
            f.flush()
            done = subprocess.run(cmd, cwd=tree, env=env, stdout=f, stderr=subprocess.STDOUT)
        if done.returncode != 0:
            raise SystemExit(f"before_after: {cmd} failed (exit {done.returncode}); see {log}")
        return rows_of(json.loads(out.read_text()))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--before", type=Path, required=True, help="checkout of the old code")
    p.add_argument("--after", type=Path, required=True, help="checkout of the new code")
    p.add_argument("--pairs", type=int, default=2, help="before/after pairs (ABBA order)")
    p.add_argument("--out", type=Path, help="also write every figure to this JSON file")
    p.add_argument("--log", type=Path, default=Path("before_after.log"), help="the runs' output")
    p.add_argument("script", help="the benchmark in bench/, e.g. cpu_decode.py")
    p.add_argument("args", nargs=argparse.REMAINDER, help="its arguments (after --)")
    a = p.parse_args()
    args = [x for x in a.args if x != "--"]
    trees = {"before": a.before.resolve(), "after": a.after.resolve()}
    print(f"# before_after: {a.script} {' '.join(args)}")
    print(f"# CPU: {cpu_name()}; {cpu_features()}; load before {load_average()}")
    for side, tree in trees.items():
        print(f"# {side}: {tree} at {commit(tree)}")
    samples: dict[str, list[Rows]] = {"before": [], "after": []}
    for i in range(a.pairs):
        order = ("before", "after") if i % 2 == 0 else ("after", "before")
        for side in order:
            samples[side].append(run_once(trees[side], a.script, args, a.log))
            print(f"# pair {i + 1}: {side} done, load {load_average()}", flush=True)

    table, records = compare(samples)
    print(format_table(["row", "metric", "before", "after", "after speed / before",
                        "before runs", "after runs"], table))  # fmt: skip
    print(f"# load after {load_average()}")
    if a.out:
        meta = {"script": a.script, "args": args, "cpu": cpu_name(), "features": cpu_features(),
                "before": commit(trees["before"]), "after": commit(trees["after"])}  # fmt: skip
        a.out.write_text(json.dumps({"meta": meta, "rows": records}, indent=2) + "\n")


if __name__ == "__main__":
    main()
