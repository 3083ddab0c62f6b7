"""Load test of a language model behind ``attnkit serve``: streamed OpenAI completions.

Issue 26's targets (CPU, 2 cores): SmolLM2 imported from GGUF, 64 new tokens
per request, concurrency 16 vs 1: generated tokens/s over all clients >= 4x,
no failed request, p99 time to first token; memory flat over a 2-minute soak;
time to first token at concurrency 1 <= 2x (prefill + one decode step); the
same clients against llama.cpp's own server where it runs.

Starts ``attnkit serve --checkpoint CHECKPOINT`` in a subprocess on 127.0.0.1
(a free port; waits for ``/v1/health``), warms it up, then:

* streaming check, concurrency 1, no other load: the median time to first
  token (TTFT) of ``max_tokens 1`` requests (~ prefill + first step), the
  median decode step (``(total - TTFT) / (tokens - 1)`` of ``--max-tokens``
  requests) and those requests' TTFT, printed as TTFT / (prefill + step);
* for each concurrency level (``--levels``, default 1,16), that many clients
  in a closed loop for ``--duration`` s (split over ``--rounds`` round-robin
  rounds), each posting streaming ``/v1/completions`` (``max_tokens``
  ``--max-tokens``, temperature 0, ``stream_options.include_usage``; distinct
  short prompts from a fixed list) and reading the server-sent events. Per
  request: TTFT (the first chunk with text), total time, completion tokens (the
  usage chunk; the text chunks where a server sends no usage), failure (not
  200, an error event, no ``[DONE]``, a broken connection). Per level:
  requests, generated tokens/s over all clients (tokens of the finished
  requests / time until the last one finished: a request started before the
  end of the level runs to its end, so the figure is a little low at high
  concurrency), p50/p99 TTFT and total latency, failures; and the ratio of
  tokens/s at the highest level to level 1;
* ``--soak S``: S seconds at the highest level, the server's RSS (psutil)
  every ``--rss-every`` s: first, last, max;
* ``--peer-url URL``: the streaming check and the levels against another
  OpenAI-compatible server (llama.cpp's: ``python -m llama_cpp.server --model
  X.gguf --host 127.0.0.1``), reported side by side. The report says whether
  ``llama_cpp`` imports here (on the 2-core machine of issue 26 it did not; the
  ``llama`` extra builds it since, but not its server's ``[server]`` extra).

Not a timed test: figures depend on the machine and what else runs on it.

  attnkit import --from gguf SmolLM2-135M-Instruct.Q4_1.gguf --out runs/smollm2
  python bench/serve_lm_load.py --checkpoint runs/smollm2
  python bench/serve_lm_load.py --checkpoint runs/smollm2 --levels 1,16 --duration 60 \\
      --soak 120 --save serve_lm_load.json
  python bench/serve_lm_load.py --checkpoint runs/smollm2 --levels 1,2 --duration 3 --warmup 1
  python bench/serve_lm_load.py --checkpoint runs/smollm2 --peer-url http://127.0.0.1:8000
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from serve_lm_load_client import (  # noqa: E402
    StreamRecord,
    percentile,
    ratio,
    run_level,
    streaming_check,
    summarize,
)
from serve_load import REPO, _cpu_model, rss_mb, start_server  # noqa: E402

# The helpers live in serve_lm_load_client.py; these are also read from here (tests/bench).
__all__ = ["StreamRecord", "main", "percentile", "ratio"]


async def soak(url: str, model: str, pid: int, args: argparse.Namespace) -> dict[str, Any]:
    """``--soak`` s at the highest level, RSS every ``--rss-every`` s."""
    samples: list[tuple[float, float]] = []
    begin = time.monotonic()

    async def sample() -> None:
        while True:
            samples.append((round(time.monotonic() - begin, 1), round(rss_mb(pid), 1)))
            await asyncio.sleep(args.rss_every)

    sampler = asyncio.ensure_future(sample())
    level = max(args.levels)
    part = await run_level(url, model, level, args.soak, args.max_tokens, args.max_requests)
    sampler.cancel()
    samples.append((round(time.monotonic() - begin, 1), round(rss_mb(pid), 1)))
    rss = [mb for _, mb in samples]
    row = summarize(level, [part])
    row.update(rss_samples=samples, rss_first_mb=rss[0], rss_last_mb=rss[-1],
               rss_max_mb=max(rss), rss_growth=round(rss[-1] / rss[0] - 1, 4))  # fmt: skip
    return row


async def measure(url: str, model: str, args: argparse.Namespace) -> dict[str, Any]:
    """Warm-up, the streaming check and the levels against one server."""
    await run_level(url, model, max(args.levels), args.warmup, args.max_tokens, args.max_requests)
    out: dict[str, Any] = {
        "streaming": await streaming_check(url, model, args.max_tokens, args.stream_repeats)
    }
    parts: dict[int, list[dict[str, Any]]] = {level: [] for level in args.levels}
    for r in range(args.rounds):
        for level in args.levels:
            part = await run_level(url, model, level, args.duration / args.rounds,
                                   args.max_tokens, args.max_requests)  # fmt: skip
            parts[level].append(part)
            if not args.json:
                rate = sum(x["tokens"] for x in part["results"] if not x["failure"])
                print(f"  {url} round {r + 1}/{args.rounds} concurrency {level}: "
                      f"{len(part['results'])} requests, {rate / part['elapsed']:.1f} tokens/s",
                      flush=True)  # fmt: skip
    rows = [summarize(level, parts[level]) for level in args.levels]
    out["levels"] = rows
    by = {r["concurrency"]: r["tokens_per_s"] for r in rows}
    out["top_over_1"] = ratio(by.get(max(args.levels)), by.get(1))
    return out


async def model_id(url: str) -> str:
    """The first model ``GET /v1/models`` names (llama.cpp's server wants a known one)."""
    import httpx

    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        return str((await http.get("/v1/models")).json()["data"][0]["id"])


def _lscpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""
    for line in out.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return _cpu_model()


def _llama_cpp() -> str:
    try:
        import llama_cpp  # type: ignore[import-not-found]
    except Exception as e:  # noqa: BLE001 - any reason it does not load is the answer
        return f"not importable here ({type(e).__name__}: {e}): llama.cpp's server not run"
    return f"llama_cpp {getattr(llama_cpp, '__version__', '?')} importable"


def _environment(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                            capture_output=True, text=True).stdout.strip()  # fmt: skip
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit,
        "machine": f"{_lscpu_model()}, {os.cpu_count()} CPUs",
        "torch": torch.__version__,
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "checkpoint": args.checkpoint,
        "server_args": args.server_args,
        "max_tokens": args.max_tokens,
        "duration_s": args.duration,
        "rounds": args.rounds,
        "llama_cpp": _llama_cpp(),
        "peer_url": args.peer_url,
    }


def _drain(proc: subprocess.Popen[str], tail: deque[str]) -> None:
    """Read the server's output so a full pipe never blocks it; keep the last lines."""
    assert proc.stdout is not None
    for line in proc.stdout:
        tail.append(line.rstrip())


def _table(name: str, result: dict[str, Any]) -> str:
    s = result["streaming"]
    out = [
        f"{name}: streaming at concurrency 1: prefill (TTFT of max_tokens 1) {s['prefill_ms']} ms, "
        f"decode step {s['decode_step_ms']} ms, TTFT {s['ttft_ms']} ms of "
        f"{s['total_ms']} ms -> TTFT / (prefill + step) = {s['ttft_over_prefill_plus_step']} "
        f"(target <= 2), {s['failed']} failed",
        f"{'conc':>5} {'req':>6} {'fail':>5} {'tok/req':>8} {'tok/s':>8} {'x c1':>6} "
        f"{'TTFT p50':>9} {'TTFT p99':>9} {'total p50':>10} {'total p99':>10}  (ms)",
    ]
    base = next((r["tokens_per_s"] for r in result["levels"] if r["concurrency"] == 1), None)
    for r in result["levels"]:
        out.append(
            f"{r['concurrency']:>5} {r['requests']:>6} {r['failed']:>5} "
            f"{r['tokens_per_request'] or 0:>8} {r['tokens_per_s'] or 0:>8.2f} "
            f"{ratio(r['tokens_per_s'], base) or '-':>6} {r['ttft_p50_ms'] or 0:>9.1f} "
            f"{r['ttft_p99_ms'] or 0:>9.1f} {r['total_p50_ms'] or 0:>10.1f} "
            f"{r['total_p99_ms'] or 0:>10.1f}"
        )
    out.append(f"tokens/s at concurrency {result['levels'][-1]['concurrency']} / concurrency 1: "
               f"{result['top_over_1']} (target >= 4)")  # fmt: skip
    for r in result["levels"]:
        if r["first_failure"]:
            out.append(f"first failure at concurrency {r['concurrency']}: {r['first_failure']}")
    return "\n".join(out)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--checkpoint", required=True, help="a decoder-only checkpoint (SmolLM2 import)")
    p.add_argument("--levels", default="1,16", help="concurrency levels (default: 1,16)")
    p.add_argument("--duration", type=float, default=60.0,
                   help="seconds per level over all rounds (default: 60)")  # fmt: skip
    p.add_argument("--rounds", type=int, default=1, help="round-robin rounds (default: 1)")
    p.add_argument("--warmup", type=float, default=10.0,
                   help="warm-up seconds at the highest level (default: 10)")  # fmt: skip
    p.add_argument("--max-tokens", type=int, default=64, help="max_tokens (default: 64)")
    p.add_argument("--max-requests", type=int, default=100_000,
                   help="at most this many requests per level (default: 100000)")  # fmt: skip
    p.add_argument("--stream-repeats", type=int, default=5,
                   help="requests of each kind in the streaming check (default: 5)")  # fmt: skip
    p.add_argument("--soak", type=float, default=0.0, help="then S seconds at the highest level")
    p.add_argument("--rss-every", type=float, default=10.0, help="soak RSS interval (default: 10)")
    p.add_argument("--server-args", default="", help="extra `attnkit serve` options, quoted")
    p.add_argument("--peer-url", help="also measure this OpenAI-compatible server (llama.cpp's)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--save", help="also write the JSON report to this file")
    args = p.parse_args()
    args.levels = sorted({int(x) for x in args.levels.split(",") if x})
    if args.peer_url and not args.peer_url.startswith(("http://127.0.0.1", "http://localhost")):
        p.error("--peer-url must be on 127.0.0.1")

    report: dict[str, Any] = {"environment": _environment(args)}
    proc, url = start_server(args.checkpoint, args.server_args.split())
    tail: deque[str] = deque(maxlen=20)
    threading.Thread(target=_drain, args=(proc, tail), daemon=True).start()
    try:
        result = asyncio.run(measure(url, "attnkit", args))
        if args.soak:
            result["soak"] = asyncio.run(soak(url, "attnkit", proc.pid, args))
        report["attnkit"] = result
    finally:
        proc.terminate()
        proc.wait(30)
    if args.peer_url:
        report["peer"] = asyncio.run(measure(args.peer_url, asyncio.run(model_id(args.peer_url)),
                                             args))  # fmt: skip
    report["environment"]["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    if args.save:
        Path(args.save).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    env = report["environment"]
    print(f"attnkit serve LM load test: {env['date']}, commit {env['commit']}, {env['machine']}, "
          f"load average {env['load_average']} -> {env['load_average_after']}")  # fmt: skip
    print(
        f"checkpoint {env['checkpoint']}, max_tokens {args.max_tokens}, temperature 0, "
        f"{args.duration:g} s per level in {args.rounds} round(s); llama.cpp: {env['llama_cpp']}"
    )
    print(_table("attnkit", report["attnkit"]))
    if "soak" in report["attnkit"]:
        s = report["attnkit"]["soak"]
        print(f"soak {s['seconds']} s at concurrency {s['concurrency']}: {s['requests']} requests, "
              f"{s['failed']} failed, {s['tokens_per_s']} tokens/s, TTFT p99 {s['ttft_p99_ms']} "
              f"ms; server RSS first {s['rss_first_mb']} MB, last {s['rss_last_mb']} MB, max "
              f"{s['rss_max_mb']} MB ({100 * s['rss_growth']:+.1f}%)")  # fmt: skip
    if "peer" in report:
        print(_table(f"peer {args.peer_url}", report["peer"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
