"""``--engine onnxruntime``: ``attnkit export --to onnx`` on onnxruntime, attnkit's own search.

``attnkit.engines.onnx_runner.OnnxStepper`` puts the two ONNX sessions behind
attnkit's stepping protocol, so greedy and beam search here are the very
code ``--engine attnkit`` runs (``attnkit.decoding.text.decode_ids``): beam,
``--alpha`` (GNMT's penalty), n-best, ``--max-len-b`` and the batching map
one to one. The graphs hold float32 weights and run on onnxruntime's CPU
provider, so ``--precision`` other than fp32 and another ``--device`` are
refused; so are attnkit's own ``--compile`` and ``--no-fast`` paths and
sampling (untested on these graphs).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

from attnkit.checkpoints.loading import LoadedModel
from attnkit.engines.base import (
    DecodeOptions,
    RunOptions,
    SourceSide,
    cpu_only,
    refuse_attnkit_paths,
    refuse_sampling,
    single_worker,
)
from attnkit.errors import UsageError


class OnnxRuntimeEngine:
    """The ONNX export's encoder and decoder-with-past graphs under attnkit's search."""

    name = "onnxruntime"
    unrecorded: ClassVar[tuple[str, ...]] = ()  # the cache records every file it loads

    @staticmethod
    def version() -> str:
        import torch

        try:
            import onnxruntime
        except ImportError:
            raise UsageError(
                "--engine onnxruntime needs onnxruntime: pip install 'attnkit[export]'"
            ) from None
        # The graphs are torch.onnx's: another torch may export other graphs.
        return f"onnxruntime {onnxruntime.__version__}, torch {torch.__version__}"

    @staticmethod
    def check(run: RunOptions, decode: DecodeOptions) -> None:
        refuse_attnkit_paths("onnxruntime", run)
        cpu_only("onnxruntime", run.device)
        single_worker("onnxruntime", run)
        if run.precision != "fp32":
            raise UsageError(
                f"--precision {run.precision}: the ONNX export holds float32 graphs; "
                "--engine onnxruntime runs fp32 only"
            )
        refuse_sampling("onnxruntime", decode)

    @staticmethod
    def check_decode(decode: DecodeOptions) -> None:
        refuse_sampling("onnxruntime", decode)

    @staticmethod
    def convert(loaded: LoadedModel, out: Path) -> None:
        from attnkit.interop.onnx.export import export_onnx

        export_onnx(loaded, out)

    def __init__(self, directory: Path, source: SourceSide, run: RunOptions) -> None:
        from attnkit.engines.onnx_runner import OnnxStepper

        self.source = source
        self.stepper = OnnxStepper(directory, threads=run.threads)

    def translate(self, texts: Sequence[str], decode: DecodeOptions) -> list[list[str]]:
        """``decode.nbest`` translations per text, best first (attnkit's search)."""
        import torch

        from attnkit.decoding.text import decode_ids

        self.check_decode(decode)
        src = self.source.ids(texts)
        with torch.no_grad():
            results = decode_ids(
                self.stepper, src, beam=decode.beam, alpha=decode.alpha, nbest=decode.nbest,
                batch_size=decode.batch_size, max_len_b=decode.max_len_b, max_len=self.source.limit,
            )  # fmt: skip
        tokenizer = self.source.tokenizer
        return [[tokenizer.decode(h.tokens) for h in r.nbest[0][: decode.nbest]] for r in results]
