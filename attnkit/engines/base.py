"""What every inference engine shares: its options, its protocol, and the source side.

``attnkit translate --engine ctranslate2|onnxruntime`` (and ``evaluate``) run
a Transformer checkpoint on another inference engine, converted once by the
existing exports (``attnkit.engines.cache``). Every engine is one
class with the same surface:

* ``RunOptions``: what is fixed when the engine loads (``--precision``,
  ``--device``, threads, and attnkit's own decoding path, which another engine
  cannot take);
* ``DecodeOptions``: what each call decodes with (beam, alpha, n-best, the
  length limit, batch size, sampling);
* ``EngineClass.check(run, decode)``: a ``UsageError`` naming the first option
  the engine cannot honour, raised before any conversion or loading;
* ``Engine.translate(texts, decode)``: ``decode.nbest`` hypotheses per text,
  best first, each a detokenized string, as ``attnkit translate`` prints them.

Sources are cut and terminated exactly as attnkit cuts them
(``attnkit.decoding.text.source_ids``), so an engine sees the same tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from attnkit.checkpoints.loading import LoadedModel
from attnkit.data.tokenizer_kinds import Tokenizer
from attnkit.decoding.text import source_ids
from attnkit.errors import UsageError


@dataclass(frozen=True)
class RunOptions:
    """Fixed when an engine loads.

    ``precision``: attnkit's ``--precision`` name (fp32, bf16, int8, int8w);
    ``device``: ``cpu``, ``cuda``, ``cuda:N`` or ``auto``; ``threads``: intra-op
    threads (None: the engine's default); ``path``: attnkit's decoding path
    (``fast``; ``compiled`` and ``reference`` exist only in attnkit);
    ``workers``: decoders that take parts of one call in parallel, each on
    ``threads`` threads (CTranslate2's ``inter_threads``; the others have 1).
    """

    precision: str = "fp32"
    device: str = "cpu"
    threads: int | None = None
    path: str = "fast"
    workers: int = 1


@dataclass(frozen=True)
class DecodeOptions:
    """One call's search: ``attnkit translate``'s options of the same names.

    ``max_len_b``: each output holds at most ``source tokens (EOS included) +
    max_len_b`` tokens, EOS included, and at most the model's ``max_len - 1``.
    """

    beam: int = 4
    alpha: float = 0.6
    nbest: int = 1
    max_len_b: int = 50
    batch_size: int = 64
    sample: bool = False


class Engine(Protocol):
    """A loaded engine: texts in, ``nbest`` detokenized hypotheses per text out."""

    name: str

    def translate(self, texts: Sequence[str], decode: DecodeOptions) -> list[list[str]]: ...


class Converter(Protocol):
    """What the engine cache needs of an engine: its name, version and conversion.

    ``unrecorded``: files the engine itself writes into its model directory
    after the conversion (llama.cpp's probe outcome), which the cache's record
    of its contents leaves out (``attnkit.engines.verify``).
    """

    name: str
    unrecorded: tuple[str, ...]

    def version(self) -> str:
        """The engine packages' versions (part of the cache key)."""
        ...

    def convert(self, loaded: LoadedModel, out: Path) -> None:
        """Write the engine's model for ``loaded`` to the new directory ``out``."""
        ...


class EngineClass(Converter, Protocol):
    """One translation engine: its version, its refusals, its conversion and its loader."""

    def check(self, run: RunOptions, decode: DecodeOptions) -> None:
        """``UsageError`` naming the first option this engine cannot honour."""
        ...

    def check_decode(self, decode: DecodeOptions) -> None:
        """``check`` for one call's options alone (a server checks each request)."""
        ...

    def __call__(self, directory: Path, source: SourceSide, run: RunOptions) -> Engine:
        """Load the converted model in ``directory`` (the class's constructor)."""
        ...


def refuse_attnkit_paths(engine: str, run: RunOptions) -> None:
    """attnkit's own decoding paths: a one-line ``UsageError`` naming the option."""
    if run.path in ("compiled", "auto"):
        raise UsageError(f"--compile: attnkit's own decode step; not with --engine {engine}")
    if run.path == "reference":
        raise UsageError(f"--no-fast: attnkit's own reference path; not with --engine {engine}")


def single_worker(engine: str, run: RunOptions) -> None:
    """``UsageError`` for ``workers`` > 1 on an engine that decodes a call in one piece."""
    if run.workers != 1:
        raise UsageError(
            f"--engine-workers {run.workers}: --engine {engine} decodes a call in one piece "
            "(--engine ctranslate2 takes several workers)"
        )


def refuse_sampling(engine: str, decode: DecodeOptions) -> None:
    if decode.sample:
        raise UsageError(
            f"--sample: attnkit's sampler (--seed, --top-k, --top-p) only; "
            f"not with --engine {engine}"
        )


def cpu_only(engine: str, device: str) -> None:
    """``UsageError`` for a ``--device`` other than the CPU (``auto`` means the CPU here)."""
    if device not in ("auto", "cpu"):
        raise UsageError(f"--device {device}: --engine {engine} runs on the CPU; use --device cpu")


@dataclass(frozen=True)
class SourceSide:
    """The checkpoint's tokenizer and position limit, as attnkit translate uses them.

    ``limit``: source tokens kept before EOS (the model's ``max_len - 1``); an
    output is at most ``limit`` tokens too (BOS takes the first position).
    """

    tokenizer: Tokenizer
    limit: int

    def ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Each text's ids, cut to ``limit``, then EOS (a blank line is EOS alone)."""
        return [source_ids(self.tokenizer, t, self.limit) for t in texts]

    def output_limit(self, src: Sequence[int], max_len_b: int) -> int:
        """attnkit's limit for the source ``src`` (EOS included): ``len + max_len_b``, capped."""
        return max(1, min(len(src) + max_len_b, self.limit))
