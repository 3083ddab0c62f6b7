"""``--engine ctranslate2``: CTranslate2's ``Translator`` on ``attnkit export --to ctranslate2``.

How attnkit's options map onto ``translate_batch``:

* ``--beam N`` -> ``beam_size=N``; ``--nbest K`` -> ``num_hypotheses=K``.
* ``--alpha``: attnkit ranks finished beams by GNMT's ``score / ((5 + |Y|) / 6) **
  alpha``; CTranslate2's ``length_penalty`` divides by ``|Y| ** alpha``. The
  two agree only at 0, so beam search takes ``--alpha 0`` (``length_penalty=0``)
  and any other alpha is refused; greedy search has no penalty to map.
* ``--max-len-b``: attnkit limits each sentence to its source length (EOS
  included) + ``max_len_b`` tokens, EOS included; ``max_decoding_length`` is
  one number per call and counts the same way. One call takes the batch's
  largest limit, and a row with a hypothesis that reached its own, smaller
  limit is decoded again with that limit (one call per such limit). Greedy
  rows are independent, so this is exact. A beam row's search is the same
  under both limits up to its own, so with ``length_penalty=0`` its answer can
  differ from its own-limit search only where that search would answer with a
  hypothesis cut at the limit (no EOS): a beam that outscored every finished
  one at the limit, then fell behind them. It is rare (1 of 2,560 rows in a
  stress run of random models whose searches mostly run to their limits; a
  test checks that no other kind of difference occurs), and one call per
  batch instead of one per distinct limit is what lets a server batch pay.
* ``--precision`` -> ``compute_type``: fp32 -> float32, int8 -> int8, bf16 ->
  bfloat16 (where ``ctranslate2.get_supported_compute_types`` lists it);
  int8w (int8 weights, bf16 activations) has no CTranslate2 counterpart.
* ``threads`` -> ``intra_threads``; ``workers`` -> ``inter_threads``: a call's
  rows are split into as many parts as there are workers no other call is
  using (calls from several threads, a server's batch workers, each go whole
  to one decoder; a call alone is split over all of them), which single
  decoders take in parallel. Single-threaded workers never wait at an OpenMP
  barrier, which on a server whose HTTP side shares the cores is what costs
  (docs/lab/results-history.md, round 10).
* ``min_decoding_length=0`` (attnkit may answer with EOS at once),
  ``max_input_length=0`` (sources are cut as attnkit cuts them, before).

The export drops ``<pad>`` from the vocabulary and appends ``</s>`` to the
source itself, so the pieces passed are attnkit's tokens without the EOS.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import ClassVar

from attnkit.checkpoints.loading import LoadedModel
from attnkit.decoding.common import Hypothesis
from attnkit.engines.base import (
    DecodeOptions,
    RunOptions,
    SourceSide,
    cpu_only,
    refuse_attnkit_paths,
    refuse_sampling,
)
from attnkit.errors import EngineError, UsageError

COMPUTE_TYPES = {"fp32": "float32", "int8": "int8", "bf16": "bfloat16"}


def _ctranslate2() -> ModuleType:
    try:
        return importlib.import_module("ctranslate2")  # (typed as a module; it has no stubs)
    except ImportError:
        raise UsageError(
            "--engine ctranslate2 needs ctranslate2: pip install 'attnkit[export]'"
        ) from None


class CTranslate2Engine:
    """A loaded CTranslate2 ``Translator`` with attnkit's source side and limits."""

    name = "ctranslate2"
    unrecorded: ClassVar[tuple[str, ...]] = ()  # the cache records every file it loads

    @staticmethod
    def version() -> str:
        return f"ctranslate2 {_ctranslate2().__version__}"

    @staticmethod
    def check(run: RunOptions, decode: DecodeOptions) -> None:
        refuse_attnkit_paths("ctranslate2", run)
        cpu_only("ctranslate2", run.device)
        if run.workers < 1:
            raise UsageError(f"--engine-workers {run.workers}: must be >= 1")
        if run.precision not in COMPUTE_TYPES:
            raise UsageError(
                f"--precision {run.precision}: CTranslate2 has no compute type for it "
                f"(fp32, int8 or bf16 with --engine ctranslate2)"
            )
        compute_type = COMPUTE_TYPES[run.precision]
        supported = _ctranslate2().get_supported_compute_types("cpu")
        if compute_type not in supported:
            raise UsageError(
                f"--precision {run.precision}: CTranslate2 has no {compute_type} kernels on "
                f"this CPU (it has {', '.join(sorted(supported))})"
            )
        CTranslate2Engine.check_decode(decode)

    @staticmethod
    def check_decode(decode: DecodeOptions) -> None:
        refuse_sampling("ctranslate2", decode)
        if decode.beam > 1 and decode.alpha != 0:
            raise UsageError(
                f"--alpha {decode.alpha:g}: CTranslate2 divides beam scores by len**alpha, "
                f"attnkit by GNMT's ((5 + len) / 6)**alpha; they agree only at --alpha 0"
            )

    @staticmethod
    def convert(loaded: LoadedModel, out: Path) -> None:
        from attnkit.interop.ctranslate2.export import export_ctranslate2

        export_ctranslate2(loaded, out)

    def __init__(self, directory: Path, source: SourceSide, run: RunOptions) -> None:
        ctranslate2 = _ctranslate2()
        self.source = source
        self.workers = run.workers
        self._calls = 0  # decode_ids calls in progress (from any thread)
        self._calls_lock = threading.Lock()
        try:
            self.translator = ctranslate2.Translator(
                str(directory), device="cpu", compute_type=COMPUTE_TYPES[run.precision],
                inter_threads=run.workers, intra_threads=run.threads or 0,
            )  # fmt: skip
        except RuntimeError as e:  # the cache was verified first: this is not damage
            raise EngineError(f"--engine ctranslate2: cannot load {directory} ({e})") from None
        tokenizer = source.tokenizer
        self._piece = tokenizer.id_to_token
        self._ids = {tokenizer.id_to_token(i): i for i in range(tokenizer.vocab_size)}

    def _run(self, src: list[list[int]], rows: list[int], limit: int, decode: DecodeOptions,
             out: list[list[Hypothesis]], parts: int = 1) -> None:  # fmt: skip
        """Decode ``src[rows]`` in one ``translate_batch`` call, in ``parts`` parts (one per
        free worker); hypotheses into ``out``."""
        part = min(decode.batch_size, -(-len(rows) // parts))
        results = self.translator.translate_batch(
            [[self._piece(t) for t in src[i][:-1]] for i in rows],  # CT2 appends the EOS
            max_batch_size=part, beam_size=decode.beam,
            num_hypotheses=decode.nbest, length_penalty=0.0, max_decoding_length=limit,
            min_decoding_length=0, max_input_length=0, return_scores=True,
        )  # fmt: skip
        for i, result in zip(rows, results):
            out[i] = [Hypothesis([self._ids[p] for p in h], float(score))
                      for h, score in zip(result.hypotheses, result.scores)]  # fmt: skip

    def decode_ids(self, src: list[list[int]], decode: DecodeOptions) -> list[list[Hypothesis]]:
        """``decode.nbest`` hypotheses per source (ids ending in EOS), as attnkit's search.

        Scores are summed log-probabilities (``length_penalty=0``), EOS included
        when generated. A source of EOS alone is not decoded (empty outputs).
        """
        self.check_decode(decode)
        with self._calls_lock:
            self._calls += 1
            parts = max(1, self.workers - (self._calls - 1))  # the workers other calls leave
        try:
            return self._decode_ids(src, decode, parts)
        finally:
            with self._calls_lock:
                self._calls -= 1

    def _decode_ids(
        self, src: list[list[int]], decode: DecodeOptions, parts: int
    ) -> list[list[Hypothesis]]:
        limits = [self.source.output_limit(s, decode.max_len_b) for s in src]
        out = [[Hypothesis([], 0.0)] * decode.nbest for _ in src]
        todo = [i for i, s in enumerate(src) if len(s) > 1]
        if todo:
            # One call at the largest limit; a row that reached its own, smaller limit
            # is decoded again with it, one call per such limit (see the module doc).
            longest = max(limits[i] for i in todo)
            self._run(src, todo, longest, decode, out, parts)
            todo = [i for i in todo if limits[i] < longest
                    and max(len(h.tokens) for h in out[i]) >= limits[i]]  # fmt: skip
        for limit in sorted({limits[i] for i in todo}):
            self._run(src, [i for i in todo if limits[i] == limit], limit, decode, out, parts)
        return out

    def translate(self, texts: Sequence[str], decode: DecodeOptions) -> list[list[str]]:
        """``decode.nbest`` translations per text, best first (see the module doc)."""
        detokenize = self.source.tokenizer.decode
        hyps = self.decode_ids(self.source.ids(texts), decode)
        return [[detokenize(h.tokens) for h in row] for row in hyps]
