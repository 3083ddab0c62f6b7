"""``attnkit export --to onnx``: an encoder graph and a decoder-with-past graph.

Both graphs run attnkit's own modules (no re-implementation): the encoder
graph is ``EncoderDecoder.encode`` + ``cross_kv``; the decoder graph is
``EncoderDecoder.decode`` for one token against ``PastCache``, a
``DecoderCache`` whose past keys/values come in as graph inputs and whose
updated keys/values go out as outputs (optimum's "decoder with past" split;
a first step passes an empty past). The position of the new token is an
input, so the graph never reads a Python number that changes per step.

Files::

    encoder.onnx   src_ids (B, S) int64 -> cross_k, cross_v (L, B, h, S, d)
    decoder.onnx   tokens (B, 1) int64, position (1,) int64, memory_mask (B, S) bool,
                   cross_k, cross_v, past_k, past_v (L, B, h, P, d)
                   -> logits (B, V), present_k, present_v (L, B, h, P + 1, d)
    config.json    ids, sizes, opset and exporter (read by attnkit.engines.onnx_runner)
    tokenizer.json attnkit's tokenizer (the runner's text in/out)

``attnkit.engines.onnx_runner`` decodes them with onnxruntime through
attnkit's own greedy and beam search. Shapes: ``L`` decoder layers, ``B``
batch rows, ``h`` heads, ``S`` source length, ``P`` past length, ``d`` head
dim, ``V`` target vocabulary.
"""

from __future__ import annotations

import json
import logging
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from attnkit.attention.cache import LayerCache
from attnkit.checkpoints import safe_files
from attnkit.checkpoints.loading import LoadedModel
from attnkit.errors import CheckpointError, ConfigError, UsageError
from attnkit.interop.outdir import staged_directory
from attnkit.models.config import TransformerConfig
from attnkit.models.encoder_decoder import EncoderDecoder

OPSET = 18
FORMAT_VERSION = 1


class _PastLayer:
    """One layer's view: appends the new keys/values to the past ones it was given."""

    def __init__(self, cache: PastCache, index: int) -> None:
        self._cache, self._index = cache, index

    def update(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        c = self._cache
        keys = torch.cat([c.past_k[self._index], k], dim=2)
        values = torch.cat([c.past_v[self._index], v], dim=2)
        c.present[self._index] = (keys, values)
        return keys, values

    @property
    def cross(self) -> tuple[Tensor, Tensor] | None:
        return self._cache.cross_k[self._index], self._cache.cross_v[self._index]

    def query_positions(self, t: int) -> Tensor:
        return self._cache.position + torch.arange(t, device=self._cache.position.device)


class PastCache:
    """A ``DecoderCache`` over tensors given as graph inputs (see the module doc)."""

    length = 0  # unused: the position comes from ``position``

    def __init__(self, past_k: Tensor, past_v: Tensor, cross_k: Tensor, cross_v: Tensor,
                 position: Tensor) -> None:  # fmt: skip
        self.past_k, self.past_v, self.cross_k, self.cross_v = past_k, past_v, cross_k, cross_v
        self.position = position
        self.present: list[tuple[Tensor, Tensor] | None] = [None] * past_k.size(0)

    def layers(self) -> Sequence[LayerCache]:
        return [_PastLayer(self, i) for i in range(self.past_k.size(0))]

    def position_offset(self) -> Tensor:
        return self.position

    def self_mask(self, t: int) -> None:
        return None  # one new query at the newest position sees every key

    def advance(self, steps: int = 1) -> None:
        pass

    def reorder(self, indices: Tensor, *, cross: bool | Tensor = True) -> PastCache:
        raise NotImplementedError("the runner reorders the arrays it feeds back")

    def stacked_present(self) -> tuple[Tensor, Tensor]:
        layers = [p for p in self.present if p is not None]
        return torch.stack([k for k, _ in layers]), torch.stack([v for _, v in layers])


class EncoderGraph(nn.Module):
    """``src_ids`` -> every decoder layer's cross-attention keys and values."""

    def __init__(self, model: EncoderDecoder) -> None:
        super().__init__()
        self.model = model

    def forward(self, src_ids: Tensor) -> tuple[Tensor, Tensor]:
        memory, _ = self.model.encode(src_ids)
        cross_k, cross_v = self.model.cross_kv(memory)
        return cross_k, cross_v


class DecoderGraph(nn.Module):
    """One decoding step against past keys/values (see the module doc)."""

    def __init__(self, model: EncoderDecoder) -> None:
        super().__init__()
        self.model = model

    def forward(
        self,
        tokens: Tensor,
        position: Tensor,
        memory_mask: Tensor,
        cross_k: Tensor,
        cross_v: Tensor,
        past_k: Tensor,
        past_v: Tensor,
    ) -> tuple[Tensor, Tensor, Tensor]:
        cache = PastCache(past_k, past_v, cross_k, cross_v, position)
        logits = self.model.decode(tokens, cache, memory_mask[:, None, None, :])
        present_k, present_v = cache.stacked_present()
        return logits, present_k, present_v


def check_onnx_exportable(c: object) -> None:
    """``ConfigError`` naming the field of a model the graphs cannot hold."""
    if not isinstance(c, TransformerConfig):
        family = getattr(c, "family", type(c).__name__)
        raise ConfigError(f"family: ONNX export takes encoder-decoder Transformers, not {family!r}")
    if c.relative_positions:
        raise ConfigError(f"positions: {c.positions!r} needs the growing cache; not exportable")
    if c.attention != "dense":
        raise ConfigError(f"attention: {c.attention!r} attention is not exportable (dense only)")
    if c.ffn != "dense":
        raise ConfigError(f"ffn: {c.ffn!r} layers are not exportable (dense FFNs only)")


def example_inputs(
    c: TransformerConfig, batch: int = 2, src_len: int = 5, past: int = 3
) -> dict[str, Tensor]:
    """Decoder-graph inputs of the right shapes (random keys/values)."""
    L, h, d = c.num_decoder_layers, c.kv_heads, c.head_dim
    return {
        "tokens": torch.full((batch, 1), c.bos_id, dtype=torch.long),
        "position": torch.tensor([past], dtype=torch.long),
        "memory_mask": torch.ones(batch, src_len, dtype=torch.bool),
        "cross_k": torch.randn(L, batch, h, src_len, d),
        "cross_v": torch.randn(L, batch, h, src_len, d),
        "past_k": torch.randn(L, batch, h, past, d),
        "past_v": torch.randn(L, batch, h, past, d),
    }


def _export(
    module: nn.Module,
    args: tuple[Tensor, ...],
    path: Path,
    names: tuple[list[str], list[str]],
    shapes: tuple[dict[int, Any] | None, ...],
) -> None:
    """``torch.onnx.export`` with the dynamo exporter (``torch.export``, then onnxscript).

    The TorchScript exporter (``dynamo=False``) fails on attnkit's attention in
    torch 2.13: under tracing, the grouped-query test ``q heads // k heads > 1``
    becomes a tensor, which ``F.scaled_dot_product_attention(enable_gqa=...)``
    refuses. ``torch.export`` keeps shapes symbolic and exports as is.
    """
    inputs, outputs = names
    quiet = logging.getLogger("torch.onnx")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # "torchvision is not installed" and such
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(
            module, args, input_names=inputs, output_names=outputs, dynamic_shapes=shapes,
            opset_version=OPSET, dynamo=True, verbose=False,
        )  # fmt: skip
        quiet.setLevel(level)
        assert program is not None
        program.save(str(path))


def export_graphs(model: EncoderDecoder, directory: Path) -> None:
    """Write ``encoder.onnx`` and ``decoder.onnx`` for ``model`` into ``directory``."""
    from torch.export import Dim

    c = model.config
    model = model.float().eval()
    batch = Dim("batch", min=1, max=4096)
    src_len = Dim("src_len", min=1, max=c.max_len)
    past_len = Dim("past_len", min=0, max=c.max_len - 1)
    src = torch.randint(4, c.src_vocab_size, (2, 5))
    with torch.no_grad():
        _export(
            EncoderGraph(model), (src,), directory / "encoder.onnx",
            (["src_ids"], ["cross_k", "cross_v"]), ({0: batch, 1: src_len},),
        )  # fmt: skip
        ex = example_inputs(c)
        kv, past = {1: batch, 3: src_len}, {1: batch, 3: past_len}
        _export(
            DecoderGraph(model), tuple(ex.values()), directory / "decoder.onnx",
            (list(ex), ["logits", "present_k", "present_v"]),
            ({0: batch}, None, {0: batch, 1: src_len}, kv, kv, past, past),
        )  # fmt: skip


def export_onnx(loaded: LoadedModel, out: Path, *, overwrite: bool = False) -> Path:
    """Write the ONNX encoder and decoder-with-past graphs of ``loaded`` to ``out``."""
    try:
        import onnx  # noqa: F401
    except ImportError:
        raise UsageError("export --to onnx needs onnx: pip install 'attnkit[export]'") from None
    c = loaded.config
    check_onnx_exportable(c)
    if loaded.tokenizer is None:
        raise ConfigError(f"{loaded.directory}: the checkpoint has no tokenizer.json to export")
    with staged_directory(out, overwrite=overwrite) as tmp:
        export_graphs(loaded.model, tmp)
        meta = {
            "format": "attnkit-onnx",
            "version": FORMAT_VERSION,
            "opset": OPSET,
            "exporter": f"torch.onnx.export(dynamo=True), torch {torch.__version__}",
            "source": str(loaded.directory),
            "pad_id": c.pad_id, "bos_id": c.bos_id, "eos_id": c.eos_id,
            "max_len": c.max_len,
            "num_layers": c.num_decoder_layers, "num_kv_heads": c.kv_heads,
            "head_dim": c.head_dim, "tgt_vocab_size": c.tgt_vocab_size,
        }  # fmt: skip
        safe_files.write_json(tmp / "config.json", meta)
        safe_files.write_text(tmp / "tokenizer.json", loaded.tokenizer.to_json())
    return Path(out)


META_LIMIT = 1 << 20  # the export's config.json is a few hundred bytes


def read_meta(directory: Path) -> dict[str, Any]:
    """The ``config.json`` of an ONNX export; ``UsageError`` naming the file otherwise."""
    path = directory / "config.json"
    try:  # checked unread first: a FIFO would block the read forever
        meta = json.loads(safe_files.read_text(path, META_LIMIT))
    except (CheckpointError, ValueError, RecursionError) as e:
        raise UsageError(f"{path}: not an attnkit ONNX export ({e})") from None
    if not isinstance(meta, dict) or meta.get("format") != "attnkit-onnx":
        raise UsageError(f"{path}: not an attnkit ONNX export (no format: attnkit-onnx)")
    return meta
