"""Issue 25: ``attnkit serve --engine ctranslate2`` at concurrency 16 against raw CTranslate2.

    flock -x /tmp/attnkit-cpu.lock python bench/serve_engine.py --checkpoint RUN

The same sentences (``--input``, default Multi30k's ``test2016.de``; ``--lines``
of them), the same CTranslate2 model (the ``--engine`` cache next to the
checkpoint, built on first use), the same beam (``--beam``, length penalty 0,
which is what ``serve --engine ctranslate2`` accepts) and threads:

* raw: ``Translator.translate_batch`` on the sentences' pieces, in batches of
  ``--raw-batch`` (default 16: what 16 clients could give a server at best),
  ``--raw-workers`` batches at a time (``inter_threads``, default 1), each on
  ``--threads`` threads, best of ``--rounds``;
* served: ``attnkit serve --engine ctranslate2 --alpha 0`` in a subprocess and
  ``--concurrency`` clients in a closed loop (``bench/serve_load.py``'s), each
  posting one sentence per request for ``--duration`` seconds, ``--rounds``
  times; sentences/s over all rounds. The clients run on the same cores as the
  server (there is no other machine), which the server's figure pays for.

Prints both, their ratio, the server's mean decode batch, where the CPU time went
(CPU milliseconds per sentence: raw CTranslate2 in this process; the server's
process; this process's clients, from ``/proc`` and ``getrusage`` around the
timed rounds), and the CPU model.
Not a timed test: figures depend on the machine and on what else runs on it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import sys
import time
from pathlib import Path

import torch
from common import environment, format_table
from serve_load import run_level, start_server, summarize

DATA = Path(os.environ.get("ATTNKIT_DATA", "/work/shared/data")) / "multi30k"


def cpu_seconds(pid: int | None = None) -> float:
    """User + system CPU seconds of this process (``pid=None``) or of process ``pid``."""
    if pid is None:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def raw_rate(
    checkpoint: Path, texts: list[str], args: argparse.Namespace
) -> tuple[float, float, str]:
    """Sentences/s of ``translate_batch`` on the engine cache's model, its CPU ms per
    sentence (this process, over the timed rounds) and that model's dir."""
    import ctranslate2
    import tokenizers

    from attnkit.checkpoints.loading import load_model
    from attnkit.checkpoints.rundir import resolve_checkpoint
    from attnkit.engines.registry import DecodeOptions, RunOptions, open_engine

    ckpt = resolve_checkpoint(checkpoint)
    open_engine("ctranslate2", ckpt, RunOptions(threads=args.threads),
                DecodeOptions(beam=args.beam, alpha=0.0),
                load=lambda d: load_model(d, "cpu"), say=print)  # fmt: skip
    model_dir = max((ckpt / "engines").glob("ctranslate2-*"), key=os.path.getmtime) / "model"
    tok = tokenizers.Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    translator = ctranslate2.Translator(str(model_dir), device="cpu",
                                        inter_threads=args.raw_workers,
                                        intra_threads=args.threads)  # fmt: skip
    pieces = [tok.encode(t).tokens for t in texts]

    def once() -> float:
        start = time.perf_counter()
        translator.translate_batch(
            pieces, max_batch_size=args.raw_batch, beam_size=args.beam, length_penalty=0.0,
            max_decoding_length=args.max_len,
        )  # fmt: skip
        return time.perf_counter() - start

    once()  # warm-up
    cpu = cpu_seconds()
    best = min(once() for _ in range(args.rounds))
    cpu_ms = (cpu_seconds() - cpu) * 1000 / (args.rounds * len(texts))
    return len(texts) / best, cpu_ms, str(model_dir)


async def served(url: str, texts: list[str], args: argparse.Namespace, pid: int) -> dict:
    body = {"beam": args.beam, "alpha": 0.0}
    await run_level(url, args.concurrency, 2.0, body, texts)  # warm-up
    server, clients = cpu_seconds(pid), cpu_seconds()
    parts = [await run_level(url, args.concurrency, args.duration, body, texts)
             for _ in range(args.rounds)]  # fmt: skip
    row = summarize(args.concurrency, parts)
    done = sum(len(part["batch_sizes"]) for part in parts)  # answered requests = sentences
    row["server_cpu_ms"] = round((cpu_seconds(pid) - server) * 1000 / max(done, 1), 2)
    row["clients_cpu_ms"] = round((cpu_seconds() - clients) * 1000 / max(done, 1), 2)
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", required=True, help="a Transformer translation run/checkpoint")
    p.add_argument("--input", default=str(DATA / "test2016.de"), help="one sentence per line")
    p.add_argument("--lines", type=int, default=1000)
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--raw-batch", type=int, default=16)
    p.add_argument(
        "--raw-workers",
        type=int,
        default=1,
        help="raw: inter_threads (each batch on one worker of --threads threads)",
    )
    p.add_argument("--max-len", type=int, default=128, help="raw: max_decoding_length")
    p.add_argument("--duration", type=float, default=20.0, help="seconds per served round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--server-args", default="", help="extra `attnkit serve` options, quoted")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    lines = Path(args.input).read_text(encoding="utf-8").splitlines()
    texts = [t for t in lines if t.strip()][: args.lines]

    raw, raw_cpu_ms, model_dir = raw_rate(Path(args.checkpoint), texts, args)
    extra = ["--engine", "ctranslate2", "--alpha", "0", "--threads", str(args.threads),
             *args.server_args.split()]  # fmt: skip
    proc, url = start_server(args.checkpoint, extra)
    try:
        row = asyncio.run(served(url, texts, args, proc.pid))
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    serve_rate = row["requests_per_s"]  # one sentence per request
    print(format_table(
        ["side", "sentences/s", "vs raw", "mean batch", "p50 ms", "p99 ms", "failed"],
        [[f"raw translate_batch (batches of {args.raw_batch}, {args.raw_workers} x "
          f"{args.threads} threads)", f"{raw:.1f}", "1.000", "", "",
          "", ""],
         [f"attnkit serve --engine ctranslate2, {args.concurrency} clients", f"{serve_rate:.1f}",
          f"{serve_rate / raw:.3f}", str(row["mean_batch_requests"]), str(row["p50_ms"]),
          str(row["p99_ms"]), str(row["failed"])]],
    ))  # fmt: skip
    print(f"CPU ms per sentence: raw CTranslate2 {raw_cpu_ms:.2f}; served: server process "
          f"{row['server_cpu_ms']:.2f}, clients {row['clients_cpu_ms']:.2f}; the server's decode "
          f"worker busy {row['worker_busy']:.0%} of the time")  # fmt: skip
    print(f"{len(texts)} sentences of {args.input}, beam {args.beam}, {args.threads} threads, "
          f"model {model_dir}; server args: {' '.join(extra)}")  # fmt: skip
    for key, value in environment(torch.device("cpu")).items():
        print(f"{key}: {value}")


if __name__ == "__main__":
    sys.exit(main())
