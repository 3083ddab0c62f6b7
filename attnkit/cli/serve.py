"""Serve a checkpoint over HTTP: a JSON API, dynamic batching and the attention explorer.

Endpoints: POST /v1/translate, /v1/generate or /v1/fill-mask (whichever fits the
checkpoint; a text classifier also /v1/classify), POST /v1/explore, GET
/v1/health, GET /v1/model, the explorer page at / and the API's description at
/docs (no CDN). A decoder-only checkpoint also answers OpenAI's API: POST
/v1/chat/completions, /v1/completions (streaming with "stream": true), GET
/v1/models. Binds to 127.0.0.1 unless --host says otherwise. Concurrent
translation requests with the same beam/alpha/nbest (and concurrent fill-mask
or classify requests) are run as one batch of at most --max-batch-tokens
(source tokens x beam), waiting at most --max-wait-ms for company; generation
requests join one running batch token by token (models with relative
positions). A request whose client disconnects
is dropped (before or during decoding, at a step boundary); one that runs past
--request-timeout is cancelled; generation is capped at --max-new-tokens;
one request holds at most --max-rows-per-request generation rows, and a stream
left unread for --stall-timeout is cancelled; SIGTERM cancels what is running
and stops within a few seconds. A request whose Host header names neither the
bound address (localhost on loopback) nor --allowed-hosts gets 400 (a DNS
rebinding guard); with --api-key (or ATTNKIT_API_KEY) every route but
/v1/health and /docs needs "Authorization: Bearer KEY". Needs the serve extra
(pip install 'attnkit[serve]').

--engine ctranslate2 or onnxruntime (Transformer translation checkpoints)
decodes /v1/translate's batches on that engine, converted at startup into
CHECKPOINT/engines/ on first use (as attnkit translate --engine); batching,
limits and cancellation stay, and the explorer's attention maps still come
from the attnkit model. An option the engine cannot honour is refused: at
startup for the server's own (ctranslate2 beam search needs --alpha 0), with
a 422 naming the field for a request's.

Example:
  attnkit serve --checkpoint quickstart-out --port 8000
  curl -s localhost:8000/v1/translate -H 'content-type: application/json' \\
       -d '{"text": ["three hundred forty-two"]}'
  attnkit serve --checkpoint quickstart-out --engine ctranslate2 --alpha 0
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from typing import TYPE_CHECKING

from attnkit.cli.argtypes import finite_float
from attnkit.cli.common import (
    CHECKPOINT_HELP,
    add_device_argument,
    add_precision_argument,
    named_checkpoint,
)
from attnkit.cli.inference_args import ENGINES, MAX_ALPHA
from attnkit.errors import UsageError

if TYPE_CHECKING:
    from collections.abc import Callable

    from attnkit.checkpoints.loading import LoadedModel
    from attnkit.inference import InferencePlan

MAX_NEW_TOKENS = 1024  # attnkit.serve.schemas.MAX_NEW_TOKENS (not imported: FastAPI may be missing)
API_KEY_ENV = "ATTNKIT_API_KEY"  # attnkit.serve.api_key.API_KEY_ENV (likewise)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", required=True, help=CHECKPOINT_HELP)
    parser.add_argument("--host", default="127.0.0.1", help="address (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port (default: 8000; 0: any)")
    parser.add_argument(
        "--max-batch-tokens",
        type=int,
        default=None,
        help="token budget of one decode batch: source tokens x beam (default: 512 on a "
        "CPU, where bigger batches add latency but no throughput; 16384 on a GPU)",
    )
    add_precision_argument(parser)
    parser.add_argument(
        "--engine",
        choices=ENGINES,
        default="attnkit",
        help="Transformer translation checkpoints: decode /v1/translate with attnkit "
        "(default), CTranslate2 or onnxruntime, converted at startup into CHECKPOINT/engines/ "
        "(once; --precision picks CTranslate2's compute type). Batching, limits and "
        "cancellation stay; the explorer's attention maps come from the attnkit model. "
        "An option the engine cannot honour is refused (ctranslate2 beam search needs "
        "--alpha 0; a request's, with a 422 naming the field)",
    )
    parser.add_argument(
        "--engine-workers",
        type=int,
        default=1,
        help="--engine ctranslate2: decoders that run in parallel, each on --threads threads "
        "(CTranslate2's inter_threads; default 1). The server forms that many batches side by "
        "side, each decoded whole by one worker; a batch decoded alone is split between the "
        "idle workers. On 2 cores, 2 workers of 1 thread keep both cores busy without OpenMP "
        "threads spinning against the server",
    )
    parser.add_argument(
        "--alpha",
        type=finite_float,
        default=0.6,
        help="length penalty alpha of a /v1/translate request that names none (default: 0.6)",
    )
    parser.add_argument(
        "--max-wait-ms",
        type=float,
        default=5.0,
        help="how long a request may wait for others to batch with (default: 5)",
    )
    parser.add_argument(
        "--max-batch-sentences", type=int, default=128, help="sentences per batch (default: 128)"
    )
    parser.add_argument(
        "--max-body-bytes",
        type=int,
        default=256 * 1024,
        help="request body limit (default: 256 KiB)",
    )
    parser.add_argument(
        "--read-timeout",
        type=float,
        default=10.0,
        help="seconds to receive a request's headers, and again its body (default: 10)",
    )
    parser.add_argument(
        "--max-connections",
        type=int,
        default=512,
        help="concurrent connections before answering 503 (default: 512)",
    )
    parser.add_argument(
        "--request-timeout",
        type=float,
        default=120.0,
        help="time budget of one request in seconds, queueing included: past it the request "
        "is cancelled at the next decoding step and answered 503 (default: 120; 0: none)",
    )
    parser.add_argument(
        "--max-new-tokens",
        type=int,
        default=MAX_NEW_TOKENS,
        help=f"token budget of one generation request: a larger max_new_tokens is "
        f"refused with 422 (default and most: {MAX_NEW_TOKENS})",
    )
    parser.add_argument(
        "--max-generation-rows",
        type=int,
        default=16,
        help="rows (choices) in the running generation batch that OpenAI-compatible requests "
        "join and leave token by token (models with rotary, ALiBi or no positions; default: 16)",
    )
    parser.add_argument(
        "--max-rows-per-request",
        type=int,
        default=None,
        help="generation rows one request holds at once; its other choices wait their turn "
        "behind other requests, so a large n cannot take the whole batch (default: a quarter "
        "of --max-generation-rows, at least 1)",
    )
    parser.add_argument(
        "--stall-timeout",
        type=float,
        default=5.0,
        help="seconds a client may leave a streamed answer unread before the request is "
        "cancelled (its rows freed) and a connection whose writes stay blocked that long is "
        "closed (default: 5)",
    )
    parser.add_argument(
        "--allowed-hosts",
        default="",
        help="comma-separated names the Host header may give besides the bound address "
        "(and localhost on loopback): example.com, .example.com for its subdomains too, "
        "or IPs. Other names get 400 (DNS rebinding guard). '*' turns the check off: "
        "unsafe, any web page can then use the model once its name points here",
    )
    parser.add_argument(
        "--api-key",
        default=None,
        help=f"require 'Authorization: Bearer KEY' on every route but /v1/health and /docs "
        f"(401 otherwise). Prefer the {API_KEY_ENV} environment variable: an option is "
        f"visible to other users in ps",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch intra-op threads of the model worker (default: half the CPU cores, "
        "at least 1: the event loop needs a core of its own)",
    )
    parser.add_argument(
        "--log-level", default="warning", help="uvicorn log level (default: warning)"
    )
    add_device_argument(parser)


def _check(args: argparse.Namespace) -> None:
    for name in ("max_batch_tokens", "max_batch_sentences", "max_body_bytes", "max_connections",
                 "max_generation_rows", "max_rows_per_request"):  # fmt: skip
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if not args.max_wait_ms >= 0:
        raise UsageError(f"--max-wait-ms must be >= 0, got {args.max_wait_ms}")
    if not args.read_timeout > 0:
        raise UsageError(f"--read-timeout must be > 0, got {args.read_timeout}")
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port must be in [0, 65535], got {args.port}")
    if args.threads is not None and args.threads < 1:
        raise UsageError(f"--threads must be >= 1, got {args.threads}")
    if args.engine_workers != 1 and args.engine != "ctranslate2":
        raise UsageError(f"--engine-workers {args.engine_workers}: only with --engine ctranslate2")
    if not 0 <= args.request_timeout < float("inf"):
        raise UsageError(f"--request-timeout must be >= 0 seconds, got {args.request_timeout}")
    if not 0 <= args.alpha <= MAX_ALPHA:
        raise UsageError(f"--alpha must be in [0, {MAX_ALPHA:g}], got {args.alpha}")
    if not 0 < args.stall_timeout < float("inf"):
        raise UsageError(f"--stall-timeout must be > 0 seconds, got {args.stall_timeout}")
    if not 1 <= args.max_new_tokens <= MAX_NEW_TOKENS:
        raise UsageError(
            f"--max-new-tokens must be in [1, {MAX_NEW_TOKENS}], got {args.max_new_tokens}"
        )


def _allowed_hosts(option: str) -> list[str]:
    """``--allowed-hosts``, each entry canonical (``attnkit.serve.host_check``)."""
    from attnkit.serve.host_check import allowed_host

    entries = [e.strip() for e in option.split(",") if e.strip()]
    out = []
    for entry in entries:
        canonical = allowed_host(entry)
        if canonical is None:
            raise UsageError(
                f"--allowed-hosts: {entry!r} is not a host name, .domain, IP address or '*' "
                "(no port: any port is accepted)"
            )
        out.append(canonical)
    return out


def _api_key(option: str | None) -> str | None:
    """The key of ``--api-key``, else of the environment; ``None``: no key required."""
    key = option if option is not None else os.environ.get(API_KEY_ENV)
    if key is not None and not key.strip():
        source = "--api-key" if option is not None else API_KEY_ENV
        raise UsageError(f"{source}: the API key is empty")
    return key


def run(args: argparse.Namespace) -> int:
    _check(args)
    args.checkpoint = named_checkpoint(args.checkpoint)  # hf:ORG/NAME: imported once
    try:
        from attnkit.serve.app import ServeSettings, create_app, shutdown_hook
        from attnkit.serve.server import build_server
    except ImportError as e:
        raise UsageError(
            f"attnkit serve needs the serve extra ({e.name} is missing): "
            "pip install 'attnkit[serve]'"
        ) from None
    allowed_hosts, api_key = _allowed_hosts(args.allowed_hosts), _api_key(args.api_key)
    from attnkit.cli.common import load_for
    from attnkit.cli.inference_args import plan_for
    from attnkit.inference import prepare
    from attnkit.serve.memory_bounds import bound_native_caches
    from attnkit.serve.model_host import ModelHost

    bound_native_caches()  # before anything packs a weight: oneDNN reads it once
    threads = args.threads or max(1, (os.cpu_count() or 2) // 2)
    # Another engine runs on the CPU, and converts (on a cache miss) from a CPU model.
    loaded = load_for("serve", args.checkpoint, args.device if args.engine == "attnkit" else "cpu")
    translator = _translator(args, loaded, threads) if args.engine != "attnkit" else None
    # How the model itself runs (--precision; int8 LMs calibrate through the tokenizer):
    # the inference plan, prepared once; /v1/translate may go to --engine's translator.
    plan = plan_for(loaded, args, "serve", engine="attnkit", calibrate=True)
    prepared = prepare(loaded, plan)
    stepper = prepared if plan.has_stepper else None
    engine = ModelHost(loaded, translator, plan=plan, stepper=stepper)  # type: ignore[arg-type]
    settings = ServeSettings(
        max_batch_tokens=args.max_batch_tokens or default_batch_tokens(engine.device.type),
        max_wait_ms=args.max_wait_ms,
        max_batch_sentences=args.max_batch_sentences,
        max_body_bytes=args.max_body_bytes,
        read_timeout=args.read_timeout,
        threads=threads,
        request_timeout=args.request_timeout or None,
        max_new_tokens=args.max_new_tokens,
        max_generation_rows=args.max_generation_rows,
        max_rows_per_request=args.max_rows_per_request,
        stall_timeout=args.stall_timeout,
        max_connections=args.max_connections,
        alpha=args.alpha,
        batch_workers=args.engine_workers,  # > 1 only with ctranslate2 (checked above)
    )
    app = create_app(engine, settings)
    server = build_server(
        app,
        on_shutdown=shutdown_hook(app),
        host=args.host,
        port=args.port,
        read_timeout=args.read_timeout,
        max_connections=args.max_connections,
        log_level=args.log_level,
        stall_timeout=args.stall_timeout,
        allowed_hosts=allowed_hosts,
        api_key=api_key,
    )
    sock = _bind(args.host, args.port)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    decoder = "" if translator is None else f"; /v1/translate on {args.engine} {args.precision}"
    print(
        f"attnkit serve: {engine.loaded.family.name} checkpoint {engine.loaded.directory} "
        f"on http://{shown}:{port} (explorer at /, API docs at /docs; "
        f"{settings.threads} torch thread(s){decoder})",
        flush=True,
    )
    if "*" in allowed_hosts:
        print("attnkit serve: --allowed-hosts '*': any Host header is answered, so a web page "
              "whose name points here can use the model (DNS rebinding)", file=sys.stderr,
              flush=True)  # fmt: skip
    server.run(sockets=[sock])
    return 0


def _translator(args: argparse.Namespace, loaded: LoadedModel, threads: int) -> object:
    """The ``--engine`` engine for ``loaded`` (a CPU model in its own precision), opened
    (converted on a cache miss) before anything else: a refusal is one line, exit 2."""
    from attnkit.cli.inference_args import engine_plan, run_options, say_for
    from attnkit.inference import prepare
    from attnkit.serve.engine_translator import open_translator

    def opener(plan: InferencePlan, load: Callable[[], LoadedModel]) -> object:
        return open_translator(plan.engine, load(), run_options(plan), alpha=args.alpha,
                               say=say_for("serve"))  # fmt: skip

    plan = engine_plan(args, "serve", "seq2seq", threads=threads, workers=args.engine_workers)
    return prepare(loaded, plan, openers={args.engine: opener})


def default_batch_tokens(device_type: str) -> int:
    """``--max-batch-tokens`` by device: on a CPU the decode step is compute-bound from
    ~64 rows on (16 sentences x beam 4: bench/NOTES.md), so a bigger batch only waits longer."""
    return 512 if device_type == "cpu" else 16384


def _bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound here so that --port 0 can print the port it got."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not the default 0: asyncio sets TCP_NODELAY only on sockets that say
    # they are TCP, and without it Nagle + delayed ACKs add ~40 ms to every answer.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise UsageError(f"--host/--port: cannot listen on {host}:{port} ({e.strerror})") from None
    sock.set_inheritable(True)
    return sock
