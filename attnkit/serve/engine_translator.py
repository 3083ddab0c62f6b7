"""``attnkit serve --engine ctranslate2|onnxruntime``: /v1/translate decoded by another engine.

Only the batched decode call of ``POST /v1/translate`` changes hands; the
server around it is the same as with ``--engine attnkit``:

* the dynamic batcher still forms the batches (one worker thread, requests
  of the same beam/alpha/nbest decoded together, ``--max-batch-tokens``);
* request limits, time budgets and cancellation still hold: a request
  cancelled before its batch runs is dropped, and one cancelled while it
  runs is answered with its reason at once (its rows' output is never
  handed back). ``onnxruntime`` runs attnkit's own search on the ONNX
  graphs (``attnkit.engines.onnx_runner.OnnxStepper``), so its cancelled
  rows stop at the next step as attnkit's do; a CTranslate2
  ``translate_batch`` call cannot stop midway, so its rows are checked
  before each call;
* the explorer reads its attention maps from the attnkit model: with
  ``explore: true`` the attnkit model is run teacher-forced on the engine's
  output, and ``POST /v1/explore`` decodes with the attnkit model as always.

The options map as for ``attnkit translate --engine``
(``attnkit.engines.registry``): output limit = source length + 50 tokens,
the model's positions at most; a request option the engine cannot honour is
a 422 naming the field (CTranslate2's beam search takes ``alpha`` 0 only).
``open_translator`` refuses at startup a server default (``serve --alpha``)
the engine cannot honour, before anything is converted, and converts the
checkpoint into ``CHECKPOINT/engines/`` on a cache miss (one line on stderr).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import torch

from attnkit.checkpoints.loading import LoadedModel
from attnkit.decoding.common import DecodeResult, Hypothesis
from attnkit.decoding.protocol import AnyStepper
from attnkit.engines.registry import ENGINES, DecodeOptions, Engine, RunOptions, open_engine
from attnkit.errors import UsageError
from attnkit.serve.cancellable import CancellableStepper, Owners
from attnkit.serve.handles import RequestHandle
from attnkit.serve.model_host_types import MAX_LEN_B, RequestError

__all__ = ["DEFAULT_BEAM", "EngineTranslator", "open_translator"]

DEFAULT_BEAM = 4  # TranslateRequest.beam's default: what a request that names no beam asks for
_OPTION = re.compile(r"^--([a-z][a-z-]*) ?([^:]*): (.*)$")


class EngineTranslator:
    """An ``attnkit.engines.registry`` engine behind the server's batched translate call
    (an ``attnkit.serve.model_host_types.Translator``)."""

    def __init__(self, engine: Engine, run: RunOptions) -> None:
        self.engine = engine
        self.name = engine.name
        self.run = run

    def check(self, *, beam: int, alpha: float, nbest: int) -> None:
        """A ``RequestError`` (422) naming the request field the engine cannot honour."""
        try:
            ENGINES[self.name].check_decode(self._options(1, beam, alpha, nbest))
        except UsageError as e:
            match = _OPTION.match(str(e))
            if match is None:
                raise RequestError(f"{e} (this server: --engine {self.name})") from None
            field, value, why = match.groups()
            raise RequestError(
                f"{field}: {value or 'it'} cannot be served by --engine {self.name} ({why})",
                param=field, code="unsupported_by_engine",
            ) from None  # fmt: skip

    def translate(
        self,
        sources: Sequence[Sequence[int]],
        *,
        beam: int,
        alpha: float,
        nbest: int,
        handles: Sequence[RequestHandle] | None = None,
    ) -> list[DecodeResult]:
        """One ``DecodeResult`` per source (ids ending in EOS), as ``serve.ModelHost.translate``."""
        nbest = nbest if beam > 1 else 1
        decode = self._options(len(sources), beam, alpha, nbest)
        stepper = getattr(self.engine, "stepper", None)
        if stepper is not None:  # onnxruntime: attnkit's search, cancelled at step boundaries
            return self._search(stepper, sources, decode, handles)
        rows = list(range(len(sources)))
        if handles is not None:  # CTranslate2: leave out the rows nobody waits for any more
            rows = [i for i in rows if not handles[i].cancelled]
            if not rows:
                raise handles[0].error()
        out = [DecodeResult([[]], [0.0], [[Hypothesis([], 0.0)]]) for _ in sources]
        hyps = self.engine.decode_ids([list(sources[i]) for i in rows], decode)  # type: ignore[attr-defined]
        for i, row in zip(rows, hyps):
            out[i] = DecodeResult([row[0].tokens], [row[0].score], [row])
        return out

    def _search(
        self,
        stepper: AnyStepper,
        sources: Sequence[Sequence[int]],
        decode: DecodeOptions,
        handles: Sequence[RequestHandle] | None,
    ) -> list[DecodeResult]:
        from attnkit.decoding.text import decode_ids

        if handles is not None:
            stepper = CancellableStepper(stepper, Owners(sources, handles))
        with torch.no_grad():
            return decode_ids(
                stepper, sources, beam=decode.beam, alpha=decode.alpha, nbest=decode.nbest,
                batch_size=decode.batch_size, max_len_b=decode.max_len_b,
                max_len=self.engine.source.limit,  # type: ignore[attr-defined]
            )  # fmt: skip

    @staticmethod
    def _options(rows: int, beam: int, alpha: float, nbest: int) -> DecodeOptions:
        return DecodeOptions(beam=beam, alpha=alpha, nbest=nbest, max_len_b=MAX_LEN_B,
                             batch_size=max(1, rows))  # fmt: skip

    def describe(self) -> dict[str, object]:
        """What ``GET /v1/model`` shows under ``engine``."""
        return {
            "name": self.name,
            "version": ENGINES[self.name].version(),
            "precision": self.run.precision,
            "threads": self.run.threads,
            "explorer": "attnkit",  # the attention maps come from the attnkit model
        }


def check_startup(name: str, run: RunOptions, alpha: float) -> None:
    """``UsageError`` naming the first server option ``--engine name`` cannot honour
    (the engine's run options, and a request that names no beam or alpha)."""
    ENGINES[name].check(run, DecodeOptions(beam=DEFAULT_BEAM, alpha=alpha))


def open_translator(
    name: str,
    loaded: LoadedModel,
    run: RunOptions,
    *,
    alpha: float,
    say: Callable[[str], None],
) -> EngineTranslator:
    """Engine ``name`` for the checkpoint of ``loaded`` (a translation model on the CPU,
    not yet converted to another precision), converted on a cache miss.

    ``alpha``: the server's default alpha (``serve --alpha``); ``say`` prints one line
    on stderr (the conversion, or why a stale cache is rebuilt).
    """
    if loaded.family.kind != "seq2seq" or loaded.family.name != "transformer":
        raise UsageError(
            f"--engine {name}: serves Transformer translation checkpoints; "
            f"{loaded.directory.name} is a {loaded.family.name} checkpoint (use --engine attnkit)"
        )
    check_startup(name, run, alpha)
    decode = DecodeOptions(beam=DEFAULT_BEAM, alpha=alpha)
    engine = open_engine(name, loaded.directory, run, decode, load=lambda d: loaded, say=say)
    return EngineTranslator(engine, run)
