"""Load test of ``attnkit serve``: throughput and latency at several concurrencies, and a soak.

Starts ``attnkit serve`` in a subprocess on 127.0.0.1 (a free port), then, for
each concurrency level, runs that many clients for ``--duration`` seconds;
each client posts one sentence at a time to ``/v1/translate`` and waits for
the answer. Prints requests/s, sentences/s, p50/p99 latency, failures and the
mean number of requests per decode batch. ``--soak S`` then holds concurrency
16 for S seconds and prints the server's RSS at the start and the end.

Hardening scenarios (``bench/serve_scenarios.py``), instead of the levels:

* ``--abandon``: 100 translate requests of 64 texts at beam 16 abandoned
  (sockets closed ``--abandon-after`` s after sending), then a small request
  timed; with ``--lm-checkpoint``, the same with 20 abandoned 1024-token
  generations; then SIGTERM with such requests in flight, timed to exit;
* ``--soak-varied N``: N translate requests of varied beams (1-16), batch
  sizes (1-64 texts), lengths, n-best and alpha from ``--soak-concurrency``
  clients, the server's RSS every ``--rss-every`` requests.

The model: ``--checkpoint RUN`` (e.g. a quickstart run), or none to train one
with ``attnkit quickstart --minutes 1`` into ``--workdir``. Not a timed test:
figures depend on the machine (and on what else runs on it).

  python bench/serve_load.py --checkpoint quickstart-out
  python bench/serve_load.py --checkpoint quickstart-out --levels 1,16 --duration 5 --json
  python bench/serve_load.py --checkpoint quickstart-out --levels 16 --duration 5 --soak 120
  python bench/serve_load.py --checkpoint quickstart-out --lm-checkpoint runs/smollm2 --abandon
  python bench/serve_load.py --checkpoint quickstart-out --soak-varied 5000
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import platform
import random
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def _words() -> Any:
    """``number_to_english`` from this checkout."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from attnkit.data.synthetic import number_to_english

    return number_to_english


def _sentences(n: int = 500, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    words = _words()
    return [words(rng.randint(1, 999_999)) for _ in range(n)]


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def start_server(checkpoint: str, extra: list[str]) -> tuple[subprocess.Popen[str], str]:
    cmd = [sys.executable, "-m", "attnkit", "serve", "--checkpoint", checkpoint, "--port", "0",
           *extra]  # fmt: skip
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env, cwd=REPO)  # fmt: skip
    assert proc.stdout is not None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        m = re.search(r"on (http://127\.0\.0\.1:\d+)", line)
        if m:
            # The line is printed once the socket is bound, before uvicorn listens on it:
            # a connection made at once can be refused (seen with SmolLM2). Wait for health.
            _wait_healthy(m.group(1), deadline)
            return proc, m.group(1)
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise SystemExit(f"attnkit serve did not start: {line!r}")


def _wait_healthy(url: str, deadline: float) -> None:
    import httpx

    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/v1/health", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"attnkit serve at {url} did not answer /v1/health")


def rss_mb(pid: int) -> float:
    import psutil

    return float(psutil.Process(pid).memory_info().rss) / 2**20


async def run_level(url: str, concurrency: int, duration: float, body: dict[str, Any],
                    sentences: list[str]) -> dict[str, Any]:  # fmt: skip
    """``concurrency`` clients in a closed loop for ``duration`` seconds; raw measurements."""
    import httpx

    latencies: list[float] = []
    batch_sizes: list[int] = []
    failures: list[str] = []
    stop_at = time.monotonic() + duration

    async def client(n: int) -> None:
        # One client (one connection) per simulated user: a shared httpx pool costs
        # O(connections x waiting requests) of Python per request, which at 64 would
        # load the 2 cores the server runs on.
        i = n
        async with httpx.AsyncClient(base_url=url, timeout=120) as http:
            while time.monotonic() < stop_at:
                text = sentences[i % len(sentences)]
                i += concurrency
                start = time.perf_counter()
                try:
                    r = await http.post("/v1/translate", json={**body, "text": [text]})
                except httpx.HTTPError as e:
                    failures.append(f"{type(e).__name__}: {e}")
                    continue
                latencies.append(time.perf_counter() - start)
                if r.status_code != 200:
                    failures.append(f"{r.status_code}: {r.text[:200]}")
                else:
                    batch_sizes.append(int(r.json()["timing"]["batch_requests"]))

    async with httpx.AsyncClient(base_url=url, timeout=120) as http:
        busy = (await http.get("/v1/health")).json()["batcher"]["busy_s"]
        begin = time.monotonic()
        await asyncio.gather(*(client(n) for n in range(concurrency)))
        elapsed = time.monotonic() - begin
        busy = (await http.get("/v1/health")).json()["batcher"]["busy_s"] - busy
    return {"latencies": latencies, "batch_sizes": batch_sizes, "failures": failures,
            "elapsed": elapsed, "busy": busy}  # fmt: skip


def summarize(concurrency: int, parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One row from the rounds of a level: pooled latencies, total requests over total time."""
    lat = sorted(x for p in parts for x in p["latencies"])
    batch_sizes = [x for p in parts for x in p["batch_sizes"]]
    failures = [x for p in parts for x in p["failures"]]
    elapsed = sum(p["elapsed"] for p in parts)

    def pct(q: float) -> float:
        return lat[min(len(lat) - 1, int(q * len(lat)))] * 1000 if lat else float("nan")

    return {
        "concurrency": concurrency,
        "requests": len(lat),
        "failed": len(failures),
        "first_failure": failures[0] if failures else None,
        "seconds": round(elapsed, 2),
        "requests_per_s": round(len(batch_sizes) / elapsed, 2),
        "per_round_requests_per_s": [
            round(len(p["batch_sizes"]) / p["elapsed"], 2) for p in parts
        ],  # fmt: skip
        "p50_ms": round(pct(0.50), 1),
        "p99_ms": round(pct(0.99), 1),
        "mean_batch_requests": round(statistics.fmean(batch_sizes), 2) if batch_sizes else None,
        "worker_busy": round(sum(p["busy"] for p in parts) / elapsed, 3),
    }


def _environment(proc_pid: int, checkpoint: str, args: argparse.Namespace) -> dict[str, Any]:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                            capture_output=True, text=True).stdout.strip()  # fmt: skip
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit,
        "machine": f"{_cpu_model()}, {os.cpu_count()} CPUs",
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "checkpoint": checkpoint,
        "server_args": args.server_args,
        "body": {"beam": args.beam, "alpha": 0.6},
    }


def _table(rows: list[dict[str, Any]]) -> str:
    head = (f"{'conc':>5} {'req':>6} {'fail':>5} {'req/s':>8} {'x c1':>6} {'p50 ms':>8} "
            f"{'p99 ms':>8} {'batch':>6} {'busy':>5}")  # fmt: skip
    base = rows[0]["requests_per_s"] if rows and rows[0]["concurrency"] == 1 else None
    out = [head]
    for r in rows:
        ratio = f"{r['requests_per_s'] / base:.2f}" if base else "-"
        out.append(
            f"{r['concurrency']:>5} {r['requests']:>6} {r['failed']:>5} "
            f"{r['requests_per_s']:>8.2f} {ratio:>6} {r['p50_ms']:>8.1f} {r['p99_ms']:>8.1f} "
            f"{r['mean_batch_requests'] or 0:>6.2f} {r['worker_busy']:>5.2f}"
        )
    return "\n".join(out)


async def main_async(args: argparse.Namespace, proc: subprocess.Popen[str], url: str) -> dict:
    sentences = _sentences()
    body = {"beam": args.beam, "alpha": 0.6}
    await run_level(url, 4, args.warmup, body, sentences)  # warm up: first shapes, allocator
    report: dict[str, Any] = {"environment": _environment(proc.pid, args.checkpoint, args)}
    # Round-robin: every level runs once per round, so drift and other jobs on the
    # machine hit all levels alike (as bench/common.py's round_robin does).
    parts: dict[int, list[dict[str, Any]]] = {level: [] for level in args.levels}
    for r in range(args.rounds):
        for level in args.levels:
            part = await run_level(url, level, args.duration / args.rounds, body, sentences)
            parts[level].append(part)
        if not args.json:
            rates = {lv: len(ps[-1]["batch_sizes"]) / ps[-1]["elapsed"] for lv, ps in parts.items()}
            done = ", ".join(f"{lv}: {rate:.1f}" for lv, rate in rates.items())
            print(f"  round {r + 1}/{args.rounds} req/s by concurrency: {done}", flush=True)
    rows = [summarize(level, parts[level]) for level in args.levels]
    report["levels"] = rows
    if args.soak:
        start_rss = rss_mb(proc.pid)
        soak = summarize(16, [await run_level(url, 16, args.soak, body, sentences)])
        end_rss = rss_mb(proc.pid)
        soak.update(rss_start_mb=round(start_rss, 1), rss_end_mb=round(end_rss, 1),
                    rss_growth=round(end_rss / start_rss - 1, 4))  # fmt: skip
        report["soak"] = soak
    report["environment"]["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    return report


def hardening(args: argparse.Namespace) -> dict[str, Any]:
    """``--abandon`` and ``--soak-varied``: each on a fresh server (SIGTERM ends one)."""
    import serve_scenarios as sc

    words = _words()
    extra = args.server_args.split()
    report: dict[str, Any] = {}
    small_tr = {"text": ["forty-two"], "beam": 4}
    large_tr = {"text": [words(900_000 + 1_111 * i) for i in range(64)], "beam": 16}
    if args.abandon:
        proc, url = start_server(args.checkpoint, extra)
        try:
            report["translate_abandon"] = sc.abandon(url, "/v1/translate", large_tr, 100,
                                                     args.abandon_after, small_tr)  # fmt: skip
            report["translate_sigterm"] = sc.sigterm(proc, url, "/v1/translate", large_tr, 8)
        finally:
            proc.kill()
        if args.lm_checkpoint:
            long_gen = {"prompt": "The capital of France is", "max_new_tokens": 1024}
            small_gen = {"prompt": "The capital of France is", "max_new_tokens": 2}
            proc, url = start_server(args.lm_checkpoint, extra)
            try:
                report["generate_abandon"] = sc.abandon(url, "/v1/generate", long_gen, 20,
                                                        args.abandon_after, small_gen)  # fmt: skip
                report["generate_sigterm"] = sc.sigterm(proc, url, "/v1/generate", long_gen, 4)
            finally:
                proc.kill()
    if args.soak_varied:
        proc, url = start_server(args.checkpoint, extra)
        try:
            report["soak_varied"] = asyncio.run(sc.soak_varied(
                url, lambda: rss_mb(proc.pid), words, requests=args.soak_varied,
                concurrency=args.soak_concurrency, every=args.rss_every))  # fmt: skip
        finally:
            proc.terminate()
            proc.wait(30)
    return report


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--checkpoint", help="checkpoint or run directory (default: train one)")
    p.add_argument("--workdir", default="/tmp/attnkit-serve-load", help="where to train one")
    p.add_argument("--levels", default="1,4,16,64", help="concurrency levels (default: 1,4,16,64)")
    p.add_argument("--duration", type=float, default=15.0, help="seconds per level (default: 15)")
    p.add_argument("--rounds", type=int, default=3, help="round-robin rounds (default: 3)")
    p.add_argument("--warmup", type=float, default=3.0, help="warm-up seconds (default: 3)")
    p.add_argument("--beam", type=int, default=4, help="beam size of every request (default: 4)")
    p.add_argument("--soak", type=float, default=0.0, help="then S seconds at concurrency 16")
    p.add_argument("--server-args", default="", help="extra `attnkit serve` options, quoted")
    p.add_argument(
        "--abandon",
        action="store_true",
        help="abandoned requests, then SIGTERM (instead of the levels)",
    )
    p.add_argument(
        "--abandon-after",
        type=float,
        default=0.5,
        help="seconds before an abandoned client hangs up (default: 0.5)",
    )
    p.add_argument("--lm-checkpoint", help="a decoder-only checkpoint for --abandon's generations")
    p.add_argument(
        "--soak-varied",
        type=int,
        default=0,
        help="N varied translate requests, RSS sampled (instead of the levels)",
    )
    p.add_argument("--soak-concurrency", type=int, default=8, help="clients of --soak-varied")
    p.add_argument("--rss-every", type=int, default=500, help="RSS sample interval (requests)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--save", help="also write the JSON report to this file")
    args = p.parse_args()
    args.levels = [int(x) for x in args.levels.split(",") if x]
    if not args.checkpoint:
        out = Path(args.workdir) / "quickstart"
        if not out.is_dir():
            subprocess.run([sys.executable, "-m", "attnkit", "quickstart", "--minutes", "1",
                            "--out", str(out), "--no-progress"], check=True, cwd=REPO)  # fmt: skip
        args.checkpoint = str(out)
    if args.abandon or args.soak_varied:
        env = _environment(os.getpid(), args.checkpoint, args)
        report = {"environment": env, **hardening(args)}
        env["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
        print(json.dumps(report, indent=2))
        if args.save:
            Path(args.save).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        return 0
    proc, url = start_server(args.checkpoint, args.server_args.split())
    try:
        report = asyncio.run(main_async(args, proc, url))
    finally:
        proc.terminate()
        proc.wait(30)
    if args.save:
        Path(args.save).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    env = report["environment"]
    print(f"attnkit serve load test: {env['date']}, commit {env['commit']}, {env['machine']}, "
          f"load average {env['load_average']} -> {env['load_average_after']}")  # fmt: skip
    print(f"checkpoint {env['checkpoint']}, beam {args.beam}, {args.duration:g} s per level "
          f"in {args.rounds} round-robin rounds")  # fmt: skip
    print(_table(report["levels"]))
    if "soak" in report:
        s = report["soak"]
        print(f"soak {s['seconds']} s at concurrency 16: {s['requests']} requests, "
              f"{s['failed']} failed, {s['requests_per_s']} req/s, p99 {s['p99_ms']} ms; "
              f"server RSS {s['rss_start_mb']} MB at the start, {s['rss_end_mb']} MB at the end "
              f"({100 * s['rss_growth']:+.1f}%)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
