"""Print Table 3 (variations on the Transformer) from ``experiments/table3.sh``'s results.

    python experiments/table3_table.py runs/table3/results.jsonl [--markdown]

Beside each row: the paper's development perplexity and BLEU (Vaswani et al., 2017,
Table 3, newstest2013 En->De, per word-piece), ours (the mean over the seeds run,
and each seed), and whether the row moves perplexity and BLEU the same way as in
the paper, relative to the base row of the same table. A change smaller than the
spread between our seeds of the base row counts as "flat" and agrees with a paper
change of the same small size (|PPL| < 0.05, |BLEU| < 0.2); a row with one seed is
compared as is and marked so. The last column says where each row ran: its CPU and its
budget (minutes, or a fixed step count for rows run on a slower machine to the base's steps).
A last line counts the rows whose perplexity, BLEU or both move as in the paper.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class PaperRow:
    change: str  # what the row changes, in the paper's terms and ours
    ppl: float | None  # the paper's dev perplexity (None: not in the table)
    bleu: float | None


# Vaswani et al. (2017), Table 3. Our base is the CPU recipe (d_model 256, 4 heads, d_k 64,
# d_ff 1024, N = 3, dropout 0.1 as the paper's); each row changes what the paper's does,
# scaled to it.
PAPER: dict[str, PaperRow] = {
    "base": PaperRow("base (paper: N 6, d 512, h 8, d_k 64, P_drop 0.1, eps_ls 0.1)", 4.92, 25.8),
    "A_heads1": PaperRow("(A) 1 head, d_k = d_model", 5.29, 24.9),
    "A_heads2": PaperRow("(A) 2 heads (paper: 4 heads, d_k 128)", 5.00, 25.5),
    "A_heads8": PaperRow("(A) 8 heads (paper: 16 heads, d_k 32)", 4.91, 25.8),
    "A_heads16": PaperRow("(A) 16 heads (paper: 32 heads, d_k 16)", 5.01, 25.4),
    "B_dk16": PaperRow("(B) d_k 16", 5.16, 25.1),
    "B_dk32": PaperRow("(B) d_k 32", 5.01, 25.4),
    "C_layers1": PaperRow("(C) N 1 (paper: N 2)", 6.11, 23.7),
    "C_layers2": PaperRow("(C) N 2 (paper: N 4)", 5.19, 25.3),
    "C_layers4": PaperRow("(C) N 4 (paper: N 8)", 4.88, 25.5),
    "C_dmodel128": PaperRow("(C) d_model 128 (paper: 256)", 5.75, 24.5),
    "C_dmodel512": PaperRow("(C) d_model 512 (paper: 1024)", 4.66, 26.0),
    "C_dff512": PaperRow("(C) d_ff 512 (paper: 1024)", 5.12, 25.4),
    "C_dff2048": PaperRow("(C) d_ff 2048 (paper: 4096)", 4.75, 26.2),
    "D_dropout0": PaperRow("(D) P_drop 0.0", 5.77, 24.6),
    "D_dropout0.2": PaperRow("(D) P_drop 0.2", 4.95, 25.5),
    "D_ls0": PaperRow("(D) eps_ls 0.0", 4.67, 25.3),
    "D_ls0.2": PaperRow("(D) eps_ls 0.2", 5.47, 25.7),
    "E_learned": PaperRow("(E) learned positions instead of sinusoids", 4.92, 25.7),
}
FLAT_PPL, FLAT_BLEU = 0.05, 0.2  # a paper change this small counts as "no change"


@dataclass
class Ours:
    ppl: list[float]
    bleu: list[float]
    steps: list[int]
    where: list[str]  # per seed: the CPU and the budget it ran under

    @property
    def mean_ppl(self) -> float:
        return statistics.fmean(self.ppl)

    @property
    def mean_bleu(self) -> float:
        return statistics.fmean(self.bleu)


def read_results(path: Path) -> dict[str, Ours]:
    """Row -> our per-seed dev perplexity, BLEU and steps (the last record of a seed wins)."""
    per_seed: dict[tuple[str, int], dict[str, float]] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                record = json.loads(line)
                per_seed[(record["row"], record["seed"])] = record
                float(record["perplexity"]), float(record["bleu"])  # numbers, or say which line
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{number}: not a JSON record ({err.msg})") from None
            except (KeyError, TypeError, ValueError) as err:
                raise ValueError(f"{path}:{number}: a record needs row, seed, perplexity and "
                                 f"bleu ({type(err).__name__}: {err})") from None  # fmt: skip
    rows: dict[str, Ours] = {}
    for (row, _), record in sorted(per_seed.items()):
        ours = rows.setdefault(row, Ours([], [], [], []))
        ours.ppl.append(float(record["perplexity"]))
        ours.bleu.append(float(record["bleu"]))
        ours.steps.append(int(record.get("steps", 0)))
        ours.where.append(where(record))
    return rows


def where(record: Mapping[str, object]) -> str:
    """One run's CPU and budget: "AMD EPYC, 15 min" or "Intel Xeon, 2154 steps".

    The budget comes from the record's ``budget`` or its command's ``--set`` overrides
    (``table3.sh`` sets only ``train.max_minutes``; a ``train.max_steps`` in the command
    came from ``EXTRA`` and is the step budget), so rows trained on different machines
    show it.
    """
    cpu = str(record.get("cpu", "?"))
    budget = record.get("budget")
    command = str(record.get("command", ""))
    if budget is None and command:
        steps = re.search(r"train\.max_steps=(\d+)", command)
        minutes = re.search(r"train\.max_minutes=([\d.]+)", command)
        if steps:
            budget = f"{steps.group(1)} steps"
        elif minutes:
            budget = f"{minutes.group(1)} min"
    return f"{cpu}, {budget}" if budget else cpu


def direction(delta: float, flat: float) -> int:
    """-1, 0 or +1: how a change compares with ``flat``."""
    return 0 if abs(delta) < flat else (1 if delta > 0 else -1)


def agreement(row: str, ours: dict[str, Ours]) -> tuple[str, str]:
    """("yes"/"no"/"-") for perplexity and for BLEU: does the row move like the paper's?"""
    paper, base = PAPER[row], PAPER["base"]
    if row == "base" or "base" not in ours or paper.ppl is None or base.ppl is None:
        return "-", "-"
    b, r = ours["base"], ours[row]
    # Our own noise: the spread of the base row's seeds (at least the paper's flat bands).
    noise_ppl = max(FLAT_PPL, _spread(b.ppl))
    noise_bleu = max(FLAT_BLEU, _spread(b.bleu))
    marks = []
    for ours_delta, paper_delta, ours_flat, paper_flat in (
        (r.mean_ppl - b.mean_ppl, paper.ppl - base.ppl, noise_ppl, FLAT_PPL),
        (r.mean_bleu - b.mean_bleu, (paper.bleu or 0.0) - (base.bleu or 0.0), noise_bleu,
         FLAT_BLEU),
    ):  # fmt: skip
        agrees = direction(ours_delta, ours_flat) == direction(paper_delta, paper_flat)
        marks.append("yes" if agrees else "no")
    return marks[0], marks[1]


def _spread(values: list[float]) -> float:
    return max(values) - min(values) if len(values) > 1 else 0.0


def table(ours: dict[str, Ours]) -> str:
    lines = [
        "| row | change | paper PPL | paper BLEU | our PPL | our BLEU | seeds | steps | "
        "PPL agrees | BLEU agrees | ran on |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row, paper in PAPER.items():
        if row not in ours:
            lines.append(
                f"| {row} | {paper.change} | {paper.ppl} | {paper.bleu} | not run | | | | | | |"
            )
            continue
        o = ours[row]
        ppl_mark, bleu_mark = agreement(row, ours)
        seeds = len(o.ppl)
        each_ppl = " / ".join(f"{p:.2f}" for p in o.ppl)
        each_bleu = " / ".join(f"{b:.1f}" for b in o.bleu)
        steps = " / ".join(str(s) for s in o.steps)
        ran_on = " / ".join(dict.fromkeys(o.where))  # once when every seed ran alike
        lines.append(
            f"| {row} | {paper.change} | {paper.ppl} | {paper.bleu} | {o.mean_ppl:.2f} "
            f"({each_ppl}) | {o.mean_bleu:.2f} ({each_bleu}) | {seeds} | {steps} | {ppl_mark} | "
            f"{bleu_mark} | {ran_on} |"
        )
    lines += ["", summary(ours)]
    return "\n".join(lines)


def summary(ours: dict[str, Ours]) -> str:
    """One line: how many of the rows run move like the paper's, per metric and both."""
    marks = [m for row in PAPER if row in ours and (m := agreement(row, ours)) != ("-", "-")]
    ppl = sum(m[0] == "yes" for m in marks)
    bleu = sum(m[1] == "yes" for m in marks)
    both = sum(m == ("yes", "yes") for m in marks)
    not_run = sum(row not in ours for row in PAPER)
    return (
        f"Directions as in the paper, of {len(marks)} row{'' if len(marks) == 1 else 's'} "
        f"compared with the base: perplexity "
        f"{ppl}, BLEU {bleu}, both {both}; rows not run: {not_run}."
    )


def main(argv: list[str] | None = None) -> str:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("results", type=Path, help="experiments/table3.sh's results.jsonl")
    args = p.parse_args(argv)
    try:
        text = table(read_results(args.results))
    except OSError as err:
        raise SystemExit(f"error: {args.results}: {err.strerror}") from None
    except ValueError as err:
        raise SystemExit(f"error: {err}") from None
    print(text)
    return text


if __name__ == "__main__":
    main()
