"""What the decoding commands share: their options, and those options as an inference plan.

Not a command (``attnkit.cli.main`` does not register it): ``translate``,
``evaluate``, ``generate``, ``serve`` and the encoder commands import it, so
that no command imports another (``tests/test_import_graph.py``).

The plan itself is decided in the library (``attnkit.inference.make_plan``);
this module only turns ``--precision``, ``--compile``/``--no-fast``,
``--engine`` and ``--device`` into its ``Options``, and hands ``prepare`` the
openers of the other engines (``attnkit.engines.registry``), which only an
entry point may import. With ``attnkit --debug`` the plan's one line
(``InferencePlan.describe``) goes to stderr.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from attnkit.cli.argtypes import finite_float, integer
from attnkit.cli.common import add_precision_argument
from attnkit.errors import UsageError

if TYPE_CHECKING:
    from attnkit.checkpoints.loading import LoadedModel
    from attnkit.engines.base import DecodeOptions, RunOptions
    from attnkit.inference import EngineOpener, InferencePlan, Options

# GNMT's length penalty ((5 + |Y|) / 6) ** alpha overflows a float past alpha ~ 130
# on long outputs; useful values are 0..2.
MAX_ALPHA = 10.0
# attnkit.engines.registry.NAMES, spelled out so that parsing imports no engine.
ENGINES = ("attnkit", "ctranslate2", "onnxruntime")
COMPILE_CHOICES = ("on", "auto")  # --compile alone is "on"


def add_decoding_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--beam", type=integer, default=4, help="beam size (default: 4)")
    parser.add_argument(
        "--alpha", type=finite_float, default=0.6, help="length penalty alpha (default: 0.6)"
    )
    parser.add_argument("--greedy", action="store_true", help="greedy search (beam 1)")
    parser.add_argument("--batch-size", type=integer, default=64, help="sentences per batch")
    parser.add_argument(
        "--max-len-b",
        type=integer,
        default=50,
        help="output length limit = source length + this (default: 50)",
    )
    speed = parser.add_mutually_exclusive_group()
    speed.add_argument(
        "--compile",
        nargs="?",
        const="on",
        choices=COMPILE_CHOICES,
        help="Transformer only: torch.compile the decode step, with the --precision's "
        "linears inside it (on the CPU inductor's C++ with frozen weights; CUDA graphs on "
        "a GPU); each new batch size compiles once, so it pays off on long inputs. "
        "'--compile auto' times the compiled and the eager step on this machine once "
        "(the first run pays the compile) and keeps the faster",
    )
    speed.add_argument(
        "--no-fast",
        action="store_true",
        help="the reference path, for debugging: the model's growing KV cache and plain "
        "fp32 linear layers (on a GPU the fast path is a static cache)",
    )
    add_precision_argument(parser)
    parser.add_argument(
        "--engine",
        choices=ENGINES,
        default="attnkit",
        help="Transformer checkpoints: decode with attnkit (default), CTranslate2 or "
        "onnxruntime; the first use converts the checkpoint into CHECKPOINT/engines/ "
        "(an option the engine cannot honour is refused; ctranslate2 beam search "
        "needs --alpha 0)",
    )


def check_decoding_arguments(args: argparse.Namespace) -> None:
    if args.beam < 1:
        raise UsageError(f"--beam must be >= 1, got {args.beam}")
    if not 0 <= args.alpha <= MAX_ALPHA:
        raise UsageError(f"--alpha must be in [0, {MAX_ALPHA:g}], got {args.alpha}")
    if args.batch_size < 1:
        raise UsageError(f"--batch-size must be >= 1, got {args.batch_size}")
    if args.max_len_b < 1:
        raise UsageError(f"--max-len-b must be >= 1, got {args.max_len_b}")


def decode_path(args: argparse.Namespace) -> str:
    """``--compile`` / ``--no-fast`` as the plan's decoding path (``attnkit.inference.PATHS``)."""
    asked = getattr(args, "compile", None)
    if asked == "auto":
        return "auto"
    if asked:  # "on" (a bare --compile), or True from a caller's namespace
        return "compiled"
    return "reference" if getattr(args, "no_fast", False) else "fast"


def plan_options(args: argparse.Namespace, **known: Any) -> Options:
    """The user's options in ``args`` (and what the command ``known``s: rows, calibrate,
    threads, workers) as the plan's ``Options``."""
    from attnkit.inference import Options

    # not given on the command line: the checkpoint's own (int4 blocks run as int4)
    asked = getattr(args, "precision", None)
    if getattr(args, "precision_from_checkpoint", False):
        asked = None
    given: dict[str, object] = {
        "precision": asked,
        "path": decode_path(args),
        "engine": getattr(args, "engine", "attnkit"),
    }
    return Options(**{**given, **known})


def plan_for(
    loaded: LoadedModel, args: argparse.Namespace, command: str, **known: object
) -> InferencePlan:
    """The inference plan for ``loaded`` (already on its device) and ``args``."""
    from attnkit.inference import CheckpointInfo, Machine, make_plan

    info = CheckpointInfo.of(loaded.model, loaded.family.kind, loaded.weights)
    plan = make_plan(info, Machine.of(loaded.model), plan_options(args, **known))
    _show(plan, args, command)
    return plan


def engine_plan(
    args: argparse.Namespace, command: str, kind: str, *, show: bool = True, **known: object
) -> InferencePlan:
    """The plan for ``--engine`` (another engine: nothing loaded, the device as given)."""
    import torch

    from attnkit.inference import CheckpointInfo, Machine, make_plan

    machine = Machine(str(getattr(args, "device", "cpu")), torch.get_num_threads())
    plan = make_plan(CheckpointInfo(kind), machine, plan_options(args, **known))
    if show:
        _show(plan, args, command)
    return plan


def _show(plan: InferencePlan, args: argparse.Namespace, command: str) -> None:
    if getattr(args, "debug", False):
        print(f"attnkit {command}: {plan.describe()}", file=sys.stderr, flush=True)


def stepper_from_args(
    loaded: LoadedModel, args: argparse.Namespace, command: str
) -> tuple[Any, InferencePlan]:
    """The ``Stepper`` that ``--compile`` / ``--no-fast`` / ``--precision`` ask for, and
    its plan (whose ``search`` the searches take). ``loaded.model`` is converted in place
    for ``--precision`` (RNNs have one path only)."""
    from attnkit.inference import prepare

    # a decode step's products: beam rows for each of a few sentences still decoding
    rows = max(1, getattr(args, "beam", 1)) * 8
    plan = plan_for(loaded, args, command, rows=rows)
    return prepare(loaded, plan), plan


def say_for(command: str) -> Callable[[str], None]:
    def say(line: str) -> None:
        print(f"attnkit {command}: {line}", file=sys.stderr, flush=True)

    return say


def run_options(plan: InferencePlan) -> RunOptions:
    """The plan as the engines' ``RunOptions`` (``attnkit.engines.registry``)."""
    from attnkit.engines.registry import RunOptions

    return RunOptions(precision=plan.precision, device=plan.device, threads=plan.threads,
                      path=plan.path, workers=plan.workers)  # fmt: skip


def engine_options(args: argparse.Namespace) -> tuple[RunOptions, DecodeOptions]:
    """``args`` as the engines' ``RunOptions`` and ``DecodeOptions``, checked by the engine
    (a ``UsageError`` naming the first option ``--engine`` cannot honour)."""
    from attnkit.engines.registry import ENGINES as OPENED

    plan = engine_plan(args, "", "seq2seq", show=False)
    run, decode = run_options(plan), decode_options(args)
    OPENED[args.engine].check(run, decode)
    return run, decode


def translation_openers(args: argparse.Namespace, command: str) -> dict[str, EngineOpener]:
    """``prepare``'s openers of the translation engines, converting on first use."""

    def opener(plan: InferencePlan, load: Callable[[], LoadedModel]) -> object:
        from attnkit.engines.registry import open_engine

        return open_engine(plan.engine, args.checkpoint, run_options(plan), decode_options(args),
                           load=lambda directory: load(), say=say_for(command))  # fmt: skip

    return {name: opener for name in ENGINES[1:]}


def engine_from_args(
    args: argparse.Namespace, command: str, loaded: LoadedModel | None = None
) -> Any:
    """The ``attnkit.engines.registry`` engine ``--engine`` names, converted on first use.

    ``loaded``: the checkpoint already loaded on the CPU (else it is loaded
    for a conversion only, on a cache miss).
    """
    from attnkit.cli.common import load_for
    from attnkit.inference import prepare

    engine_options(args)  # a refused option fails before anything is hashed or converted
    plan = engine_plan(args, command, "seq2seq")
    source = loaded if loaded is not None else lambda: load_for(command, args.checkpoint, "cpu")
    return prepare(source, plan, openers=translation_openers(args, command))


def decode_options(args: argparse.Namespace) -> DecodeOptions:
    """The search options of ``args`` as ``attnkit.engines.registry.DecodeOptions``."""
    from attnkit.engines.registry import DecodeOptions

    beam = 1 if args.greedy else args.beam
    nbest = getattr(args, "nbest", 1) if beam > 1 else 1
    sample = getattr(args, "sample", False)
    return DecodeOptions(beam=beam, alpha=args.alpha, nbest=nbest, max_len_b=args.max_len_b,
                         batch_size=args.batch_size, sample=sample)  # fmt: skip
