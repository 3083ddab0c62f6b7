"""``attnkit generate --engine llama.cpp``: llama.cpp (llama-cpp-python) on the GGUF export.

The first use converts the checkpoint with ``attnkit export --to gguf`` into
the engine cache beside it (``attnkit.engines.cache``: keyed by the
weights, llama-cpp-python's and gguf's versions), one file per precision:
``--precision fp32`` runs the f32 file, ``int8`` the q8_0 one (llama.cpp's
32-weight blocks with one scale; llama.cpp's own int8 kernels). Only what the
GGUF export writes can run: a Llama-type decoder-only checkpoint with a
byte-level BPE tokenizer (anything else is the export's one-line error).

How ``generate``'s options map onto llama.cpp:

* the prompt is attnkit's token ids (its tokenizer, its chat template), and
  the ids llama.cpp draws are turned into text by attnkit's tokenizer, so
  both engines see and print the same tokens;
* ``--temperature 0`` -> llama.cpp's greedy sampler: the same tokens as
  ``--engine attnkit``'s greedy search wherever the two argmaxes agree (a test
  checks it on a tiny model, ``experiments/gguf_llama_cpp.py`` on SmolLM2);
* otherwise top-k (0 = all), top-p and the temperature, then llama.cpp's
  sampler seeded with ``--seed`` (min-p and typical sampling off): the same
  distribution, other draws than attnkit's sampler. llama-cpp-python's chain
  cuts top-p before the temperature (attnkit after it), so ``--top-p`` < 1
  runs only at temperature 1 (``check_sample`` refuses the rest);
* a prompt plus ``--max-new-tokens`` longer than the model's context is
  refused (attnkit slides its window; llama.cpp's context is fixed);
* ``--precision bf16``/``int8w`` and ``--device`` other than the CPU are refused.

**A crash is reported, not suffered.** llama-cpp-python built from source
died with a segmentation fault at its first generated token on the issue's
Xeon (issue 25). Before the first use on a machine, a child process loads the
file and draws one token (``probe``); a child killed by a signal becomes a
one-line ``EngineError`` naming the signal, the CPU and llama-cpp-python's
version, and the outcome is kept beside the converted model (per CPU model and
file), so the check costs one child process once.
"""

from __future__ import annotations

import ctypes
import json
import signal
import subprocess
import sys
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import ClassVar

from attnkit import jsonio
from attnkit.checkpoints.loading import LoadedModel
from attnkit.checkpoints.safe_files import read_text
from attnkit.engines.base import RunOptions, cpu_only, refuse_attnkit_paths
from attnkit.engines.verify import MAX_UNRECORDED_BYTES
from attnkit.errors import CheckpointError, EngineError, UsageError
from attnkit.kernels.machine_choice import cpu_name
from attnkit.output_paths.atomic import write_text

NAME = "llama.cpp"
# attnkit's --precision -> the GGUF export's tensor type (the file llama.cpp runs)
GGUF_TYPES = {"fp32": "f32", "int8": "q8_0"}
PROBE_FILE = "probe.json"


def _need_llama_cpp() -> ModuleType:
    try:
        import llama_cpp
    except ImportError:
        raise UsageError(
            "--engine llama.cpp needs llama-cpp-python: pip install 'attnkit[llama]' "
            "(a C++ build; see the README's engines section)"
        ) from None
    return llama_cpp


def gguf_file(directory: Path, precision: str) -> Path:
    """The converted file that ``--precision`` runs, in the engine cache's model directory."""
    return directory / f"model-{GGUF_TYPES[precision]}.gguf"


@dataclass(frozen=True)
class SampleOptions:
    """One generation: ``attnkit generate``'s options of the same names.

    ``eos_id``: stop after drawing it (None: run ``max_new_tokens``).
    """

    max_new_tokens: int
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    eos_id: int | None = None


class LlamaCppEngine:
    """llama.cpp on the checkpoint's GGUF export: prompt ids in, new ids out, one by one."""

    name = NAME
    unrecorded: ClassVar[tuple[str, ...]] = (PROBE_FILE,)  # written after the conversion

    @staticmethod
    def version() -> str:
        """llama-cpp-python's version and the gguf writer's (the cache key's engine part)."""
        from importlib.metadata import version

        # gguf writes the file: a new version may write it otherwise
        return f"llama-cpp-python {_need_llama_cpp().__version__}, gguf {version('gguf')}"

    @staticmethod
    def check(run: RunOptions) -> None:
        """``UsageError`` naming the first option llama.cpp cannot honour."""
        refuse_attnkit_paths(NAME, run)
        if run.precision not in GGUF_TYPES:
            raise UsageError(
                f"--precision {run.precision}: --engine llama.cpp runs "
                f"{' or '.join(GGUF_TYPES)} (the GGUF export's f32 and q8_0 files)"
            )
        cpu_only(NAME, run.device)

    @staticmethod
    def check_sample(options: SampleOptions) -> None:
        """``UsageError`` for sampling llama.cpp would do otherwise than attnkit: its
        chain cuts top-p before the temperature, attnkit's after (top-k commutes)."""
        if options.top_p < 1 and options.temperature not in (0, 1):
            raise UsageError(
                f"--top-p {options.top_p:g} with --temperature {options.temperature:g}: "
                "llama.cpp applies top-p before the temperature, attnkit after, so --engine "
                "llama.cpp takes --top-p only at --temperature 1 (or 0, greedy)"
            )

    @staticmethod
    def convert(loaded: LoadedModel, out: Path) -> None:
        """Both files (f32 and q8_0) into the new directory ``out``."""
        from attnkit.interop.gguf.export import export_gguf

        out.mkdir(parents=True)
        for precision, gguf_type in GGUF_TYPES.items():
            export_gguf(loaded, gguf_file(out, precision), precision=gguf_type)

    def __init__(self, directory: Path, run: RunOptions, context: int) -> None:
        """Load the file ``run.precision`` names with a context of ``context`` tokens."""
        llama_cpp = _need_llama_cpp()
        log = _quiet_log(llama_cpp)
        self.context = context
        file = gguf_file(directory, run.precision)
        try:
            self.model = llama_cpp.Llama(
                model_path=str(file), n_ctx=context, n_batch=min(context, 512),
                n_threads=run.threads, n_threads_batch=run.threads, verbose=False,
            )  # fmt: skip
        except ValueError as e:  # llama-cpp-python's "Failed to load model"; the log says why
            why = log[-1].strip() if log else str(e)
            raise EngineError(f"--engine llama.cpp: {file}: {why}") from None

    def close(self) -> None:
        """Free llama.cpp's model now: left to the interpreter's exit, llama-cpp-python's
        finalizer runs after its module is torn down and prints an ignored exception."""
        self.model.close()

    def stream(self, prompt: list[int], options: SampleOptions) -> Iterator[int]:
        """The ids drawn after ``prompt``, one at a time (the EOS id included, then stop)."""
        if len(prompt) + options.max_new_tokens > self.context:
            raise UsageError(
                f"--max-new-tokens {options.max_new_tokens}: the prompt's {len(prompt)} "
                f"tokens and the new ones exceed the context ({self.context}); --engine "
                "llama.cpp does not slide the window (--engine attnkit does)"
            )
        if options.max_new_tokens == 0:
            return
        self.model.set_seed(options.seed)
        greedy = options.temperature == 0
        tokens = self.model.generate(
            prompt, temp=0.0 if greedy else options.temperature, top_k=options.top_k,
            top_p=options.top_p, min_p=0.0, typical_p=1.0, repeat_penalty=1.0,
        )  # fmt: skip
        for count, token in enumerate(tokens, start=1):
            yield int(token)
            if int(token) == options.eos_id or count == options.max_new_tokens:
                return


# -- llama.cpp's log ----------------------------------------------------------------------

_LOG: deque[str] = deque(maxlen=8)  # llama.cpp's last lines, for an error message
_LOG_CALLBACK: object = None  # the ctypes callback, kept alive while llama.cpp may call it


def _quiet_log(llama_cpp: ModuleType) -> deque[str]:
    """Keep llama.cpp's log lines off the terminal (the last few, for errors).

    llama-cpp-python 0.3's own filter reads ggml's older level numbers, so with
    ``verbose=False`` warnings still print as errors (e.g. that a context padded
    to 256 tokens exceeds a small model's training context); a generation's
    output stays attnkit's lines only.
    """
    global _LOG_CALLBACK
    if _LOG_CALLBACK is None:

        def keep(level: int, text: bytes, user_data: object) -> None:
            _LOG.append(text.decode("utf-8", errors="replace"))

        _LOG_CALLBACK = llama_cpp.llama_log_callback(keep)
        llama_cpp.llama_log_set(_LOG_CALLBACK, ctypes.c_void_p(0))
    return _LOG


# -- the crash probe ----------------------------------------------------------------------

# An 8-token prompt (llama.cpp's batched prefill) and two tokens drawn (its decode step).
PROBE_CODE = (
    "import itertools, sys, llama_cpp\n"
    "m = llama_cpp.Llama(model_path=sys.argv[1], n_ctx=16, verbose=False)\n"
    "list(itertools.islice(m.generate([int(sys.argv[2])] * 8, temp=0.0), 2))\n"
    "m.close()\n"
)


def _signal_name(returncode: int) -> str:
    try:
        return f"signal {-returncode} ({signal.Signals(-returncode).name})"
    except ValueError:
        return f"signal {-returncode}"


def probe(file: Path, first_id: int, command: list[str] | None = None) -> None:
    """Draw one token from ``file`` in a child process, once per CPU model and file.

    ``command``: the child's command line (default: this Python running
    ``PROBE_CODE`` on ``file``); a test passes one that crashes. A child
    killed by a signal raises ``EngineError``; the outcome is kept in
    ``file``'s directory (``probe.json``) under the CPU's model name.
    """
    record = file.parent / PROBE_FILE
    cpu = cpu_name()
    try:  # checked unread first: a FIFO here would block the read forever
        seen = json.loads(read_text(record, MAX_UNRECORDED_BYTES))
    except (CheckpointError, ValueError, RecursionError):
        seen = {}
    key = f"{cpu} | {file.name}"
    outcome = seen.get(key) if isinstance(seen, dict) else None
    if outcome is None:
        argv = command or [sys.executable, "-c", PROBE_CODE, str(file), str(first_id)]
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode < 0:
            outcome = f"died with {_signal_name(done.returncode)}"
        elif done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no message"])[-1]
            outcome = f"failed (exit {done.returncode}: {last})"
        else:
            outcome = "ok"
        if not isinstance(seen, dict):
            seen = {}
        seen[key] = outcome
        write_text(record, jsonio.dumps(seen, indent=2) + "\n")
    if outcome != "ok":
        llama_cpp = _need_llama_cpp()
        raise EngineError(
            f"--engine llama.cpp: llama-cpp-python {llama_cpp.__version__} {outcome} drawing "
            f"its first token on this CPU ({cpu}); --engine attnkit runs this checkpoint "
            f"(delete {record} to try again)"
        )
