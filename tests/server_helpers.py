"""A real ``attnkit serve`` in a subprocess, for the server tests (a module of its own, not
conftest, so that tests/serve imports it by a unique name)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Served:
    """A running ``attnkit serve`` subprocess."""

    process: subprocess.Popen[str]
    url: str
    port: int


def start_server(run: Path, *extra: str, timeout: float = 60.0) -> Served:
    """``attnkit serve --checkpoint run --port 0 ...`` in a subprocess; waits until it listens."""
    # This checkout's attnkit, whatever the working directory or an editable install says.
    repo = str(Path(__file__).resolve().parents[1])
    path = os.pathsep.join(p for p in (repo, os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": path}
    process = subprocess.Popen(
        [sys.executable, "-m", "attnkit", "serve", "--checkpoint", str(run), "--port", "0",
         "--threads", "1", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )  # fmt: skip
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    line = ""
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        match = re.search(r"on http://([\d.]+):(\d+)", line)
        if match:
            port = int(match.group(2))
            served = Served(process, f"http://{match.group(1)}:{port}", port)
            _wait_healthy(served, deadline)
            return served
        if not line and process.poll() is not None:
            break
    process.kill()
    raise AssertionError(f"attnkit serve did not start: {line!r}")


def _wait_healthy(served: Served, deadline: float) -> None:
    import httpx

    while time.monotonic() < deadline:
        try:
            if httpx.get(served.url + "/v1/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.1)
    raise AssertionError("attnkit serve never answered /v1/health")


def stop_server(served: Served) -> None:
    served.process.terminate()
    try:
        served.process.wait(10)
    except subprocess.TimeoutExpired:
        served.process.kill()
        served.process.wait(10)
