"""Turn experiments/multi30k_progression.sh's results into the Markdown tables of
docs/lab/results-history.md: the progression (against its published anchors) and the small Table 3
(against the paper's values and direction of change).

    python experiments/progression_table.py runs/progression/results.jsonl

Steps and parameter counts are read from each row's training log beside results.jsonl
(``OUT/ROW.train.log``, or ``OUT/ROW_sSEED.train.log`` for a run with ``SEED``). A row run
with several seeds shows each seed's figure and their mean. A third table follows the
validation loss of the position ablation rows step by step (issue 13), read from each
run's ``metrics.jsonl``.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

BASE = "transformer_sinusoidal"  # the reference row of both tables

# Tokenized lowercased BLEU, greedy, Multi30k De->En test2016 (bentrevett/pytorch-seq2seq).
ANCHORS = {
    "rnn_lstm": "13.8 (LSTM)",
    "rnn_gru_context": "20.6 (GRU + context)",
    "bahdanau": "28.3",
    "luong_general": "none published",
    "luong_dot": "none published",
    "luong_location": "none published",
    "transformer_sinusoidal": "36.5",
    "transformer_learned": "36.5",
    "transformer_relative16": "36.5",
}

# The paper's Table 3 (newstest2013 En->De dev BLEU; base: 8 heads, dropout 0.1, eps_ls 0.1,
# sinusoids = 25.8). Our base row has 4 heads, dropout 0.3, eps_ls 0.1, sinusoids.
# Each entry: what the row changes, the paper's figures, and the paper's sign of the
# change measured the way this table measures it (row minus `against`).
TABLE3: dict[str, tuple[str, str, str, int]] = {
    # row: (change, paper, against, paper's sign)
    "heads1": ("4 -> 1 head", "(A) 1 head 24.9 vs 4 heads 25.5", BASE, -1),
    "heads8": ("4 -> 8 heads", "(A) 8 heads 25.8 vs 4 heads 25.5", BASE, +1),
    "heads16": ("4 -> 16 heads", "(A) 16 heads 25.8 vs 4 heads 25.5", BASE, +1),
    "dropout0": ("dropout 0.3 -> 0", "(D) dropout 0.0: 24.6 vs 25.8 at 0.1", "dropout0.1", -1),
    "dropout0.1": ("dropout 0.3 -> 0.1", "(D) no 0.3 row in the paper", BASE, 0),
    "ls0": ("label smoothing 0.1 -> 0", "(D) eps_ls 0: 25.3 vs 25.8 BLEU", BASE, -1),
    "transformer_learned": ("sinusoids -> learned", "(E) learned 25.7 vs 25.8", BASE, -1),
}


# The position ablation (why sinusoidal positions start slowly): rows and what each tests.
ABLATION = {
    "transformer_sinusoidal": "sinusoids (amplitude 1) + token embeddings x sqrt(D) (std 1)",
    "transformer_learned": "learned positions, initialised with std D^-0.5 (small)",
    "transformer_no_positions": "no positions at all",
    "transformer_unscaled": "sinusoids + token embeddings not scaled (std D^-0.5)",
}


def _log_name(row: str, seed: int | None) -> str:
    return row if seed is None else f"{row}_s{seed}"


def _log_lines(results_path: Path, name: str, file: str = "{name}.train.log") -> list[dict]:
    """The JSON lines of ``NAME.train.log`` beside the results (none if it is missing),
    or of another file named by ``file`` (the run's ``{name}/metrics.jsonl``)."""
    log = results_path.parent / file.format(name=name)
    if not log.is_file():
        return []
    records = []
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("{"):
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return records


def train_facts(results_path: Path, row: str, seeds: list[int | None] = [None]) -> tuple[str, str]:  # noqa: B006
    """(steps, parameters) from each seed's training log beside the results, or ``?``."""
    steps, params = [], "?"
    for seed in seeds:
        name = _log_name(row, seed)
        log = results_path.parent / f"{name}.train.log"
        if not log.is_file():
            steps.append("?")
            continue
        found = re.search(
            r"([\d.]+)M parameters", log.read_text(encoding="utf-8", errors="replace")
        )
        params = f"{found.group(1)}M" if found else params
        with_step = [r for r in _log_lines(results_path, name) if "step" in r]
        steps.append(str(with_step[-1]["step"]) if with_step else "?")
    return " / ".join(steps), params


Rows = dict[str, dict[str, list[dict]]]


def by_row(records: list[dict]) -> Rows:
    """``{row: {"greedy": [record per seed], "beam": [...]}}`` (a seed's last record wins)."""
    keyed: dict[tuple[str, str, int | None], dict] = {}
    for r in records:
        keyed[(r["row"], r["search"], r.get("seed"))] = r
    rows: Rows = {}
    for (row, search, _), r in keyed.items():
        rows.setdefault(row, {}).setdefault(search, []).append(r)
    for searches in rows.values():
        for runs in searches.values():
            runs.sort(key=lambda r: r.get("seed") or 0)
    return rows


def _fmt(runs: list[dict] | None, key: str) -> str:
    """One figure, or each seed's and their mean: ``33.1 / 33.9 (33.5)``."""
    values = [r[key] for r in runs or [] if key in r]
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.1f}"
    return " / ".join(f"{v:.1f}" for v in values) + f" ({sum(values) / len(values):.1f})"


def _first(runs: dict[str, list[dict]]) -> dict:
    return next(iter(runs.get("greedy") or runs.get("beam") or []))


def _seeds(runs: dict[str, list[dict]]) -> list[int | None]:
    return [r.get("seed") for r in runs.get("greedy") or runs.get("beam") or []]


def progression_table(rows: Rows, path: Path) -> str:
    lines = [
        "| row | params | steps | train s | greedy: tok. lc BLEU | beam 5: tok. lc BLEU "
        "| beam 5: sacreBLEU | beam 5: chrF | test ppl | anchor (greedy, tok. lc) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row, anchor in ANCHORS.items():
        if row not in rows:
            continue
        greedy, beam = rows[row].get("greedy"), rows[row].get("beam")
        steps, params = train_facts(path, row, _seeds(rows[row]))
        seconds = " / ".join(str(r["train_seconds"]) for r in greedy or beam or [])
        lines.append(
            f"| {row} | {params} | {steps} | {seconds} | "
            f"{_fmt(greedy, 'bleu_lc')} | {_fmt(beam, 'bleu_lc')} | {_fmt(beam, 'bleu')} | "
            f"{_fmt(beam, 'chrf')} | {_fmt(greedy or beam, 'perplexity')} | {anchor} |"
        )
    return "\n".join(lines)


def table3(rows: Rows, path: Path) -> str:
    lines = [
        "| row | change | steps | beam 5: tok. lc BLEU | change in BLEU | test ppl "
        "| the paper | same direction as the paper? |",
        "|---|---|---|---|---|---|---|---|",
    ]
    if BASE in rows:
        steps, _ = train_facts(path, BASE, _seeds(rows[BASE]))
        base = rows[BASE].get("beam")
        lines.append(
            f"| {BASE} | base: 4 heads, dropout 0.3, eps_ls 0.1, sinusoids | {steps} | "
            f"{_fmt(base, 'bleu_lc')} | - | {_fmt(base, 'perplexity')} | base: 25.8 | - |"
        )
    for row, (change, paper, against, sign) in TABLE3.items():
        beam = rows.get(row, {}).get("beam")
        if beam is None:
            continue
        ref = rows.get(against, {}).get("beam")
        steps, _ = train_facts(path, row, _seeds(rows[row]))
        delta, verdict = "-", "-"
        if ref is not None:
            d = _mean(beam, "bleu_lc") - _mean(ref, "bleu_lc")
            delta = f"{d:+.1f} vs {against}"
            if sign:
                verdict = "yes" if d * sign > 0 else "no" if d * sign < 0 else "no change"
        lines.append(
            f"| {row} | {change} | {steps} | {_fmt(beam, 'bleu_lc')} | {delta} | "
            f"{_fmt(beam, 'perplexity')} | {paper} | {verdict} |"
        )
    return "\n".join(lines)


def _mean(runs: list[dict], key: str) -> float:
    return sum(r[key] for r in runs) / len(runs)


def ablation_table(rows: Rows, path: Path) -> str:
    """Validation loss of the position ablation rows at every shared evaluation step
    (``train.eval_every``), then at each run's last step."""
    curves = {}
    for row in ABLATION:
        for seed in _seeds(rows.get(row, {})):
            name = _log_name(row, seed)
            logged = _log_lines(path, name, "{name}/metrics.jsonl")
            valid = {r["step"]: r["loss"] for r in logged if r.get("split") == "valid"}
            if valid:
                curves[name] = (row, valid)
    if not curves:
        return ""
    # the evaluation steps most runs share (the last evaluation falls where the time ran out)
    counts: dict[int, int] = {}
    for _, losses in curves.values():
        for step in list(losses)[:-1]:
            counts[step] = counts.get(step, 0) + 1
    shared = sorted(s for s, n in counts.items() if n * 2 > len(curves))
    lines = [
        "| run | what it tests | "
        + " | ".join(f"valid loss @ {s}" for s in shared)
        + " | last: valid loss @ step | greedy BLEU |",
        "|---|---|" + "---|" * (len(shared) + 2),
    ]
    for name, (row, losses) in curves.items():
        cells = " | ".join(f"{losses[s]:.2f}" if s in losses else "-" for s in shared)
        last = max(losses)
        greedy = [r for r in rows[row].get("greedy", []) if _log_name(row, r.get("seed")) == name]
        lines.append(
            f"| {name} | {ABLATION[row]} | {cells} | {losses[last]:.2f} @ {last} | "
            f"{_fmt(greedy, 'bleu_lc')} |"
        )
    return "\n".join(lines)


def main(path_text: str) -> None:
    path = Path(path_text)
    records = [json.loads(line) for line in path.open(encoding="utf-8") if line.strip()]
    rows = by_row(records)
    print(progression_table(rows, path))
    print()
    print(table3(rows, path))
    print()
    print(ablation_table(rows, path))
    print()
    for r in records:
        name = _log_name(r["row"], r.get("seed"))
        print(f"- {name} ({r['search']}): `{r['command']}`, commit {r['commit']}, "
              f"{r['device']}, {r['date']}")  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1])
