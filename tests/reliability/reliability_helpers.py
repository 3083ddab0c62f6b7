"""Helpers for the reliability tests: the real CLI in a subprocess, tiny data, snapshots.

Every command runs as ``python -m attnkit ...`` in a child process, so the exit
code and the standard error seen here are exactly what a user sees.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from attnkit.data.synthetic import number_splits

REPO = Path(__file__).parents[2]

# A run config small enough that a successful run takes seconds.
TINY_CONFIG = """\
task: translation
data: {{dir: {dir}, src_lang: en, tgt_lang: de, train: train, valid: valid,
        max_len: {max_len}, skip_empty: {skip_empty}}}
tokenizer: {{kind: char}}
model: {{preset: small, d_model: 32, num_heads: 2, d_ff: 64,
        num_encoder_layers: 1, num_decoder_layers: 1, max_len: 128}}
train: {{max_steps: {max_steps}, max_tokens: 800, warmup_steps: 2, log_every: 2,
        eval_every: 100, save_every: 0, keep_last: 2, valid_bleu_sentences: 2}}
decode: {{beam: 2}}
"""

SPLITS = number_splits(60, 6, 6, low=1, high=999, seed=0)


def lines(split: str, side: int) -> list[str]:
    return [pair[side] for pair in SPLITS[split]]


def write_lines(path: Path, text_lines: list[str], *, newline: str = "\n", bom: bool = False):
    data = ("\ufeff" if bom else "") + "".join(line + newline for line in text_lines)
    path.write_bytes(data.encode("utf-8"))
    return path


def write_corpus(directory: Path) -> Path:
    """``train``/``valid``/``test`` ``.en``/``.de`` files of number words."""
    directory.mkdir(parents=True, exist_ok=True)
    for split in SPLITS:
        write_lines(directory / f"{split}.en", lines(split, 0))
        write_lines(directory / f"{split}.de", lines(split, 1))
    return directory


def write_config(
    path: Path, data_dir: Path, *, max_len=96, skip_empty=False, max_steps=1, text=None
) -> Path:
    if text is None:
        text = TINY_CONFIG.format(
            dir=data_dir,
            max_len=max_len,
            skip_empty=str(skip_empty).lower(),
            max_steps=max_steps,
        )
    path.write_text(text, encoding="utf-8")
    return path


# Every command runs under this address-space limit: a check that stops refusing a
# huge allocation (model.max_len: 10**12) then fails the test instead of eating the machine.
ADDRESS_SPACE_LIMIT = 6 << 30


def _limit_address_space() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_LIMIT, resource.RLIM_INFINITY))


def cli(*argv: str, cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess:
    """``python -m attnkit ARGV`` in a child process (under ``ADDRESS_SPACE_LIMIT``);
    stdout/stderr captured as text."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.setdefault("OMP_NUM_THREADS", "1")  # tiny models; be kind to a shared machine
    result = subprocess.run(
        [sys.executable, "-m", "attnkit", *argv],
        cwd=cwd,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        encoding="utf-8",
        errors="replace",
        timeout=600,
        preexec_fn=_limit_address_space,
    )
    check_json_lines(result.stdout, what=" ".join(argv[:1]))
    return result


def check_json_lines(text: str, what: str = "output") -> None:
    """Every JSON value in ``text`` that starts a line (a summary, a ``--json`` line, an
    indented block) must be strict JSON (``attnkit.jsonio``): ``NaN``/``Infinity``,
    which only Python's parser reads, fail the test."""
    lenient = json.JSONDecoder()
    strict = json.JSONDecoder(parse_constant=_not_json)
    start = 0
    for line in text.splitlines(keepends=True):
        if line.startswith(("{", "[")):
            try:
                lenient.raw_decode(text, start)
            except ValueError:
                pass  # not JSON at all (a message in brackets)
            else:
                try:
                    strict.raw_decode(text, start)
                except ValueError as e:
                    raise AssertionError(f"{what}: not strict JSON ({e}): {line.strip()}") from e
        start += len(line)


def _not_json(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def snapshot(*roots: Path) -> dict[str, tuple]:
    """Every file and directory under ``roots``: kind, size, mtime and a hash of the bytes.

    Two equal snapshots mean nothing was created, removed, rewritten or touched, the
    run lock (``.attnkit.lock``) included: a command writes its PID there only once it
    has been accepted (``RunLock.announce``), so a refused one leaves it as it was.
    """
    state: dict[str, tuple] = {}
    for root in roots:
        if not root.exists():
            state[str(root)] = ("missing",)
            continue
        for path in [root, *sorted(root.rglob("*"))]:
            st = path.lstat()
            if path.is_dir():
                state[str(path)] = ("dir", st.st_mtime_ns)
            elif path.is_file():
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
                state[str(path)] = ("file", st.st_size, st.st_mtime_ns, digest)
            else:
                state[str(path)] = ("other", st.st_mtime_ns)
    return state


@dataclass
class TrainedRun:
    root: Path  # data files, config and the run directory
    data: Path  # data dir (train.en has CRLF endings, train.de a BOM, see conftest)
    run: Path  # the run directory
    checkpoint: Path  # its only checkpoint
    stdout: str
    stderr: str
