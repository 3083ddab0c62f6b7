"""Translate with an ``attnkit export --to onnx`` directory on onnxruntime.

``OnnxStepper`` adapts the two ONNX sessions to attnkit's stepping protocol
(``start(src_ids) -> state``, ``step(tokens, state) -> logits, state``), so
``attnkit.decoding``'s greedy and beam search run on it unchanged: the
search logic is the very code ``attnkit translate`` runs, and only the
network underneath differs. The state holds numpy arrays (the past keys and
values the decoder graph returned) and follows beams with ``reorder``.

Command line (needs attnkit, onnxruntime; no PyTorch model)::

    python -m attnkit.engines.onnx_runner DIR --input test.de [--beam 4 --alpha 0.6 | --greedy]

Shapes: ``L`` decoder layers, ``B`` rows (sentences x beams), ``h`` heads,
``S`` source length, ``P`` past length, ``d`` head dim, ``V`` vocabulary.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from attnkit.data.tokenizer_kinds import Tokenizer, load_tokenizer
from attnkit.decoding.text import decode_ids, source_ids
from attnkit.errors import AttnkitError, EngineError, UsageError
from attnkit.interop.onnx.export import read_meta


@dataclass
class OnnxState:
    """Decoding state: past keys/values ``(L, B, h, P, d)``, cross keys/values, source mask."""

    past_k: np.ndarray
    past_v: np.ndarray
    cross_k: np.ndarray
    cross_v: np.ndarray
    memory_mask: np.ndarray  # (B, S) bool
    position: int = 0

    def reorder(self, indices: Tensor, *, group_size: int | None = None) -> OnnxState:
        """Keep rows ``indices``; with ``group_size`` the source side stays where it is."""
        index = indices.cpu().numpy()
        self.past_k = np.ascontiguousarray(self.past_k[:, index])
        self.past_v = np.ascontiguousarray(self.past_v[:, index])
        if group_size is None:
            self.cross_k = np.ascontiguousarray(self.cross_k[:, index])
            self.cross_v = np.ascontiguousarray(self.cross_v[:, index])
            self.memory_mask = self.memory_mask[index]
        return self


class OnnxStepper:
    """The stepping protocol over ``encoder.onnx`` and ``decoder.onnx`` (onnxruntime)."""

    def __init__(self, directory: str | Path, *, threads: int | None = None) -> None:
        try:
            import onnxruntime as ort
        except ImportError:
            raise UsageError("the ONNX runner needs onnxruntime: pip install onnxruntime") from None
        self.directory = Path(directory)
        meta = self.meta = read_meta(self.directory)
        self.pad_id, self.bos_id, self.eos_id = meta["pad_id"], meta["bos_id"], meta["eos_id"]
        self.max_len = int(meta["max_len"])
        options = ort.SessionOptions()
        if threads is not None:
            options.intra_op_num_threads = threads
        sessions = []
        for name in ("encoder.onnx", "decoder.onnx"):
            path = self.directory / name
            if not path.is_file():  # (is_file is False for a FIFO: never opened)
                what = "not a regular file" if path.exists() else "not found"
                raise UsageError(f"{path}: {what}; is {self.directory} an ONNX export?")
            try:
                sessions.append(
                    ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
                )
            except Exception as e:  # onnxruntime's own classes (InvalidProtobuf, Fail, ...)
                if not type(e).__module__.startswith("onnxruntime"):
                    raise
                raise EngineError(f"{path}: onnxruntime cannot load it ({e})") from None
        self.encoder, self.decoder = sessions

    def start(self, src_ids: Tensor, *, max_steps: int | None = None) -> OnnxState:
        src = src_ids.cpu().numpy().astype(np.int64)
        cross_k, cross_v = self.encoder.run(None, {"src_ids": src})
        L, B, h, _, d = cross_k.shape
        empty = np.zeros((L, B, h, 0, d), dtype=np.float32)
        return OnnxState(empty, empty.copy(), cross_k, cross_v, src != self.pad_id)

    def step(self, tokens: Tensor, state: OnnxState) -> tuple[Tensor, OnnxState]:
        if state.position >= self.max_len:
            raise ValueError(f"max_len: {state.position + 1} positions exceed {self.max_len}")
        feed = {
            "tokens": tokens.cpu().numpy().astype(np.int64).reshape(-1, 1),
            "position": np.array([state.position], dtype=np.int64),
            "memory_mask": state.memory_mask,
            "cross_k": state.cross_k,
            "cross_v": state.cross_v,
            "past_k": state.past_k,
            "past_v": state.past_v,
        }
        logits, state.past_k, state.past_v = self.decoder.run(None, feed)
        state.position += 1
        return torch.from_numpy(logits), state


def translate(
    stepper: OnnxStepper,
    tokenizer: Tokenizer,
    texts: Sequence[str],
    *,
    beam: int = 4,
    alpha: float = 0.6,
    batch_size: int = 64,
    max_len_b: int = 50,
) -> list[str]:
    """Translate ``texts`` as ``attnkit translate`` does (same truncation, limits, search)."""
    limit = stepper.max_len - 1
    src = [source_ids(tokenizer, t, limit) for t in texts]
    with torch.no_grad():
        results = decode_ids(stepper, src, beam=beam, alpha=alpha, batch_size=batch_size,
                             max_len_b=max_len_b, max_len=limit)  # fmt: skip
    return [tokenizer.decode(r.tokens[0]) for r in results]


def load(directory: str | Path, *, threads: int | None = None) -> tuple[OnnxStepper, Tokenizer]:
    """The stepper and the tokenizer of an ONNX export directory."""
    stepper = OnnxStepper(directory, threads=threads)
    return stepper, load_tokenizer(Path(directory) / "tokenizer.json")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m attnkit.engines.onnx_runner",
        description="Translate with an 'attnkit export --to onnx' directory on onnxruntime, "
        "with attnkit's own greedy and beam search.",
    )
    parser.add_argument("directory", help="an 'attnkit export --to onnx' directory")
    parser.add_argument("--input", help="one sentence per line (default: stdin)")
    parser.add_argument("--beam", type=int, default=4, help="beam size (default: 4)")
    parser.add_argument("--alpha", type=float, default=0.6, help="GNMT length penalty (0.6)")
    parser.add_argument("--greedy", action="store_true", help="greedy search (beam 1)")
    parser.add_argument("--batch-size", type=int, default=64, help="sentences per batch")
    parser.add_argument(
        "--max-len-b", type=int, default=50, help="output limit = source length + this (50)"
    )
    args = parser.parse_args(argv)
    try:
        from attnkit.data.readers import read_input_lines as read_lines

        stepper, tokenizer = load(args.directory)
        lines = read_lines(args.input)
        out = translate(stepper, tokenizer, lines, beam=1 if args.greedy else args.beam,
                        alpha=args.alpha, batch_size=args.batch_size,
                        max_len_b=args.max_len_b)  # fmt: skip
    except AttnkitError as e:
        print(f"onnx_runner: error: {e}", file=sys.stderr)
        return e.exit_code
    sys.stdout.write("".join(line + "\n" for line in out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
