"""The inference plan: how one checkpoint runs on this machine, decided in one place.

``make_plan(checkpoint, machine, options)`` decides, from what the checkpoint
is (``CheckpointInfo``), the machine it runs on (``Machine``) and what the
user asked for (``Options``), every "how to run" choice into one frozen
``InferencePlan``:

* ``engine``: attnkit itself, or another engine (CTranslate2, onnxruntime,
  llama.cpp), which ``attnkit.inference.prepare`` opens through an opener the
  caller hands in;
* ``precision`` and ``linears``: the weights' conversion (``attnkit.quantize``):
  fp32 as loaded, oneDNN-packed or plain (MKL) fp32 (measured per machine:
  ``attnkit.kernels.fp32_choice``), bf16, int8 (with SmoothQuant calibration
  for a decoder-only LM given its tokenizer), int8w or int4 (4-bit group-wise weights;
  with activation-aware scales, AWQ, calibrated likewise when ``ATTNKIT_INT4_AWQ=1``);
  with no precision asked for, the checkpoint's own (``CheckpointInfo.weights``:
  ``int4`` for one stored as int4 blocks, on the CPU, run as loaded; else fp32);
* ``attention``: the attention backend of the decode step (``one-query``, two
  batched GEMVs, on the CPU; the fused ``reference`` kernel elsewhere and in a
  compiled step);
* ``cache`` and ``compile_mode``: the model's own cache, the static cache, or
  the static cache compiled (CUDA graphs on CUDA); with ``--compile auto``
  (path ``auto``), the compiled step or the eager one, whichever decodes the
  model faster on this machine (timed once, then cached:
  ``attnkit.inference.compile_choice``);
* ``rows``: the rows per product the kernel choice is measured at;
* ``search``: the device-dependent search settings (``SearchSettings``: how
  often to ask the device whether every sentence finished, whether a host
  sync is free).

Every field records how it was decided (``why``: ``option``, ``checkpoint``,
``machine`` or ``default``), and ``describe()`` is the one line a command
prints on stderr (``attnkit --debug``). Nothing below the plan tests the
device to pick a path (ARCHITECTURE.md, principles 13 and 17): the searches
read ``plan.search``, ``decoding.static.build_stepper`` installs what the plan
names.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

import torch
from torch import nn

from attnkit.decoding.common import SearchSettings
from attnkit.errors import UsageError

ATTNKIT = "attnkit"  # the native engine: every other name is opened by prepare()'s openers
PATHS = ("fast", "compiled", "reference", "auto")  # auto: compiled where faster here
PRECISIONS = ("fp32", "bf16", "int8", "int8w", "int4")
BLOCKS_NOTE = "the checkpoint's GGUF blocks on the int4 kernel (Q8_0 as two 4-bit planes)"
# The "all finished?" interval off the CPU: each check stalls the host until the device
# catches up (attnkit.decoding.common), so an accelerator asks every 8 steps.
CHECK_EVERY_ACCELERATOR = 8
# Kinds of model with no decode step: the plan converts their weights, nothing more.
NO_DECODER = frozenset({"masked_lm", "image_classifier"})
DEFAULT_ROWS = 32  # rows per product when the command says nothing (a batch of a few)

Source = str  # "option" | "checkpoint" | "machine" | "default"


@dataclass(frozen=True)
class CheckpointInfo:
    """What the plan needs to know of a checkpoint.

    Attributes:
        kind: its family's kind (``attnkit.models.FAMILIES``: ``seq2seq``,
            ``causal_lm``, ``masked_lm``, ``image_classifier``; ``""`` unknown).
        static_cache: the model has a static-cache decode step (the Transformers).
        decoder_only_lm: a decoder-only LM (int8 calibrates it for SmoothQuant).
        model: the loaded model, whose linears the fp32 kernel choice times on
            this machine; ``None`` when another engine runs it (not loaded).
        weights: how its linears were loaded (``LoadedModel.weights``): ``fp32``, or
            ``int4`` for a checkpoint stored as int4 blocks (``Int4Linear`` modules).
    """

    kind: str = ""
    static_cache: bool = False
    decoder_only_lm: bool = False
    model: nn.Module | None = field(default=None, compare=False, repr=False)
    weights: str = "fp32"

    @classmethod
    def of(cls, model: object, kind: str = "", weights: str = "fp32") -> CheckpointInfo:
        """The facts of a loaded ``model`` (of family kind ``kind``, linears loaded as
        ``weights``)."""
        from attnkit.decoding.static import SupportsStaticCache
        from attnkit.models import DecoderOnlyLM

        module = model if isinstance(model, nn.Module) else None
        return cls(kind, isinstance(model, SupportsStaticCache),
                   isinstance(model, DecoderOnlyLM), module, weights)  # fmt: skip


@dataclass(frozen=True)
class Machine:
    """Where the checkpoint runs: ``device`` (for another engine: as the user gave it,
    ``auto`` included) and torch's intra-op ``threads``."""

    device: str = "cpu"
    threads: int = 1

    @classmethod
    def here(cls, device: torch.device | str) -> Machine:
        return cls(str(device), torch.get_num_threads())

    @classmethod
    def of(cls, model: nn.Module) -> Machine:
        """The machine ``model``'s weights are on (the CPU for a model without any)."""
        first = next(iter(model.parameters()), None)
        return cls.here("cpu" if first is None else first.device)

    @property
    def on_cpu(self) -> bool:
        return torch.device(self.device).type == "cpu" if self.device != "auto" else False


@dataclass(frozen=True)
class Options:
    """What the user asked for (the commands' ``--precision``, ``--compile``/``--no-fast``,
    ``--engine``, ``--threads``, ``--engine-workers``) and what the command knows.

    ``rows``: the rows per product the command expects (1 for one user's
    generation, beams x sentences for translation); ``convert=False`` keeps the
    weights as loaded (library callers wanting only a stepper); ``calibrate``:
    the command has the tokenizer, so int8 on a decoder-only LM is calibrated.
    ``precision=None``: the checkpoint's own (module doc). ``positions``: the longest
    sequence a decode will hold (prompt + new tokens), where the command knows it:
    ``--compile auto`` times the compiled step at the cache size the run will use, so
    that the run reuses what the timing compiled.
    """

    precision: str | None = None
    path: str = "fast"
    engine: str = ATTNKIT
    rows: int | None = None
    threads: int | None = None
    workers: int = 1
    check_every: int | None = None
    convert: bool = True
    calibrate: bool = False
    positions: int | None = None


@dataclass(frozen=True)
class InferencePlan:
    """How a checkpoint runs (module doc); ``why`` maps each field to how it was decided."""

    engine: str
    device: str
    precision: str
    path: str
    linears: str  # as-loaded | packed | plain | bf16 | bf16-plain | int8 | int8-smooth | int8w
    # | int4 | int4-awq | engine
    attention: str  # one-query | reference | as-loaded
    cache: str  # model | static | compiled | none (no decode step) | engine
    compile_mode: str | None
    rows: int
    threads: int
    workers: int
    search: SearchSettings
    why: tuple[tuple[str, Source], ...] = ()
    note: str = ""  # what a measurement found, for describe()
    weights: str = "fp32"  # the checkpoint's linears as loaded (CheckpointInfo.weights)

    def decided(self, name: str) -> Source:
        """How field ``name`` was decided."""
        return dict(self.why).get(name, "default")

    @property
    def has_stepper(self) -> bool:
        return self.cache not in ("none", "engine")

    def describe(self) -> str:
        """One line: each choice and how it was made."""
        shown = ["engine", "device", "precision", "linears", "attention", "cache"]
        parts = [f"{name} {getattr(self, name)} ({self.decided(name)})" for name in shown]
        if self.cache != "engine":
            parts.append(
                f"check every {self.search.check_every} step(s) ({self.decided('search')})"
            )
        line = "inference plan: " + ", ".join(parts)
        return f"{line}; {self.note}" if self.note else line


def _why(items: Iterable[tuple[str, Source]]) -> tuple[tuple[str, Source], ...]:
    return tuple(items)


def make_plan(checkpoint: CheckpointInfo, machine: Machine, options: Options) -> InferencePlan:
    """The plan for ``checkpoint`` on ``machine`` with the user's ``options``.

    Raises ``UsageError`` (naming the option) for what cannot run: ``--compile``
    on a checkpoint without a static-cache step, a CPU precision off the CPU.
    The fp32 kernel choice may time the model's linears here once (then cached
    per machine: ``kernels.fp32_choice``).
    """
    if options.path not in PATHS:
        raise ValueError(f"path: expected one of {', '.join(PATHS)}; got {options.path!r}")
    if options.path == "auto" and options.engine == ATTNKIT:  # another engine refuses it
        return _auto(checkpoint, machine, options)
    # int4 blocks run as stored where the int4 kernel runs: the CPU (compiled or not)
    runs_int4 = machine.on_cpu and options.engine == ATTNKIT
    own = checkpoint.weights if runs_int4 else "fp32"
    precision = options.precision or own
    if precision not in PRECISIONS:
        raise ValueError(f"precision: expected one of {', '.join(PRECISIONS)}")
    rows = max(1, options.rows or DEFAULT_ROWS)
    threads = options.threads or machine.threads
    given = "option"
    precision_why = given if precision != "fp32" else "default"
    if options.precision is None and precision != "fp32":
        precision_why = "checkpoint"
    path_why = given if options.path != "fast" else "default"
    if options.engine != ATTNKIT:
        return InferencePlan(
            options.engine, machine.device, precision, options.path, "engine",
            "engine", "engine", None, rows, threads, options.workers, SearchSettings(),
            _why([("engine", given), ("device", given), ("precision", precision_why)]),
        )  # fmt: skip
    decodes = checkpoint.kind not in NO_DECODER
    if options.path == "compiled" and decodes and not checkpoint.static_cache:
        raise UsageError("--compile: only Transformer checkpoints have a compiled decode step")
    cpu = machine.on_cpu
    linears, linears_why, note = _linears(checkpoint, cpu, precision, options, rows)
    search = SearchSettings(
        check_every=options.check_every
        if options.check_every is not None
        else (1 if cpu else CHECK_EVERY_ACCELERATOR),
        sync_free=cpu,
    )
    if not decodes:
        attention, cache, mode = "as-loaded", "none", None
    else:
        attention = "one-query" if cpu and options.path != "compiled" else "reference"
        compiled = options.path == "compiled"
        cache = (
            "compiled" if compiled else "model" if options.path == "reference" or cpu else "static"
        )
        cuda = torch.device(machine.device).type == "cuda"
        mode = "reduce-overhead" if compiled and cuda else None
        if compiled and cpu:
            from attnkit.decoding.static import FROZEN_TUNED

            # inductor's C++ wrapper, the weights frozen into it, its GEMM templates timed
            # against aten's kernels: on a 2-core AMD EPYC the templates ran SmolLM2's fp32
            # step 2.2x and its int4 step 1.4x faster than the untuned frozen step, and left
            # fbgemm's int8 as it was (bench/NOTES.md)
            mode = FROZEN_TUNED
    why = [("engine", "default"), ("device", "machine"), ("precision", precision_why),
           ("path", path_why), ("linears", linears_why), ("attention", "machine"),
           ("cache", "machine" if options.path == "fast" else path_why),
           ("search", given if options.check_every is not None else "machine")]  # fmt: skip
    return InferencePlan(
        ATTNKIT, machine.device, precision, options.path, linears, attention, cache,
        mode, rows, threads, options.workers, search, _why(why), note, checkpoint.weights,
    )  # fmt: skip


def _auto(checkpoint: CheckpointInfo, machine: Machine, options: Options) -> InferencePlan:
    """``--compile auto``: the compiled plan where its step is the faster on this machine,
    else the eager (``fast``) one; measured on ``checkpoint.model`` once, then cached.
    Without a static-cache step or a model to time: the eager plan."""
    eager = make_plan(checkpoint, machine, replace(options, path="fast"))
    model = checkpoint.model
    if not checkpoint.static_cache or model is None or checkpoint.kind in NO_DECODER:
        return eager
    from attnkit.inference import compile_choice

    compiled = make_plan(checkpoint, machine, replace(options, path="compiled"))
    choice = compile_choice.choose(model, eager, compiled, positions=options.positions)
    chosen = compiled if choice.compiled else eager
    why = tuple((k, "machine" if k in ("path", "cache") else v) for k, v in chosen.why)
    note = "; ".join(n for n in (chosen.note, choice.describe()) if n)
    return replace(chosen, why=why, note=note)


def _linears(
    checkpoint: CheckpointInfo, cpu: bool, precision: str, options: Options, rows: int
) -> tuple[str, Source, str]:
    """The weights' conversion (``attnkit.quantize``), how it was decided, and a note.

    fp32 on the fast CPU path packs the weights for oneDNN where that is the
    faster on this machine (timed once at ``rows`` rows per product, then
    cached); the reference path and ``--compile`` keep the plain ``nn.Linear``
    modules (a compiled step's frozen fp32 weights inductor takes itself, into its
    own GEMM template or MKL's, whichever it timed faster: oneDNN's packed weight is
    opaque to the compiler). ``--compile`` with
    bf16 gets plain bf16 linears (``bf16-plain``) whose frozen weights inductor
    packs for oneDNN; with int8, int8w and int4 the compiled step calls the same
    kernels as the eager one. Off the CPU only fp32 exists (the packed and int8
    kernels are CPU kernels).
    """
    path = options.path
    if not options.convert:
        return "as-loaded", "default", ""
    if not cpu:
        if precision != "fp32":
            raise UsageError(f"--precision {precision}: CPU kernels; add --device cpu")
        return "as-loaded", "machine", ""
    if precision == "fp32" and path != "fast":
        return "as-loaded", "option", ""
    if path == "compiled" and precision == "bf16":
        return "bf16-plain", "option", ""
    if precision == "fp32":
        from attnkit.kernels import fp32_choice

        if checkpoint.model is None:
            return "as-loaded", "default", ""
        choice = fp32_choice.choose(checkpoint.model, rows)
        return ("packed" if choice.packed else "plain"), "machine", choice.describe()
    if precision == "int4":
        from attnkit.kernels.torch_ops import int4_unavailable

        if why := int4_unavailable():
            raise UsageError(f"--precision int4: {why}; use int8w or upgrade torch")
        if checkpoint.weights == "int4" and options.precision is None:
            # GGUF blocks run as stored: their linears (a tied output layer's too) and the
            # token table for lookups as the file had it
            return "as-loaded", "checkpoint", BLOCKS_NOTE
        from attnkit.quantize.awq import awq_from_env

        # float weights (not int4 blocks) of a language model whose tokenizer the command has
        if options.calibrate and checkpoint.decoder_only_lm and checkpoint.weights != "int4":
            if awq_from_env():
                return "int4-awq", "checkpoint", ""
    if precision == "int8" and options.calibrate and checkpoint.decoder_only_lm:
        return "int8-smooth", "checkpoint", ""
    return precision, "option", ""
