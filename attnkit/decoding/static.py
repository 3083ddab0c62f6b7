"""The fast decoding path: a static KV cache, optionally a compiled step, as a wrapper.

``StaticCacheStepper(model)`` is a ``Stepper`` around any model that declares
``SupportsStaticCache`` (the encoder-decoder Transformer and the decoder-only
LM). When a search gives its length bound (``start(..., max_steps=T)``), the
model's cache is a ``StaticKVCache`` of exactly that capacity, so every step
has the same shapes; greedy and beam outputs are the same tokens as on the
model's own growing cache (tested). Without a bound, or for a model whose
``cache_layout()`` is ``None`` (relative positions), it steps the model
as it is.

``compile=True`` also compiles the step with ``torch.compile`` (inductor's
C++ code on the CPU; CUDA graphs with ``mode="reduce-overhead"``, which the
inference plan picks on a GPU; ``mode=FROZEN``, the plan's choice on the CPU:
inductor's C++ wrapper, so a step is one C++ call rather than a Python
function calling kernels, and frozen weights, which inductor folds and packs
as constants). The model's linears are compiled with it, whatever their
precision: the quantized ones (``attnkit.quantize``) call their kernels as
ops inductor knows (``attnkit.kernels.torch_ops``). Shapes are
static (``dynamic=False``): each new (batch, source length, capacity)
compiles once; past ``RECOMPILE_LIMIT`` shapes in a process torch gives up
and the stepper decodes eagerly. So that a new prompt length does not mean a new compile
(a minute or two on 2 cores), a compiled stepper rounds the cache's capacity up
to a power of two (``capacity_bucket``: at least ``MIN_BUCKET``, at most the
model's ``max_positions``) and compiles only the one-token step: a pass over
several tokens (a prompt, a drafted continuation) runs eagerly on the same
cache, once per prompt or draft, where its GEMMs are wide anyway. For the same
reason an encoder-decoder's source batch is right-padded to a power-of-two
length (``source_bucket``; the padding is masked, ``PadsSource``), so
length-sorted batches of a file share a compiled step. A step that
fails to compile warns once and runs eagerly from then on: correct, just slower.

The compiled function is a pure function of tensors (the cache view is
rebuilt inside), so it never reads a Python counter that changes per step.

``build_stepper`` installs what the inference plan (``attnkit.inference``)
decided: the attention backend, which cache, compiled or not. Nothing here
looks at the device: the plan has.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import torch
from torch import Tensor, nn

from attnkit.attention.backends import REFERENCE, use_backend
from attnkit.attention.cache import DecoderCache
from attnkit.attention.masks import Mask
from attnkit.attention.one_query import OneQueryDecode
from attnkit.attention.static_cache import StaticBufferPool, StaticKVCache
from attnkit.decoding.protocol import AnyStepper
from attnkit.models.state import CacheFactory, CacheLayout, DecoderState


@runtime_checkable
class SupportsStaticCache(Protocol):
    """A model whose decode step runs against any ``DecoderCache`` it is given."""

    pad_id: int
    bos_id: int
    eos_id: int

    def cache_layout(self) -> CacheLayout | None: ...

    def start(
        self, src_ids: Tensor, *, max_steps: int | None = None, cache: CacheFactory = ...
    ) -> DecoderState: ...

    def step(self, tokens: Tensor, state: DecoderState) -> tuple[Tensor, DecoderState]: ...

    def decode(self, tokens: Tensor, cache: DecoderCache, memory_mask: Mask | None) -> Tensor: ...


@runtime_checkable
class PadsSource(Protocol):
    """An encoder-decoder whose ``start`` masks right-padding of the source exactly
    (``pads_source``): a compiled stepper pads each source batch to a bucketed length
    (``source_bucket``), so that batches of other source lengths reuse a compiled step."""

    pads_source: bool


def _static_logits(
    model: SupportsStaticCache,
    tokens: Tensor,
    memory_mask: Mask | None,
    self_k: list[Tensor],
    self_v: list[Tensor],
    cross_k: Tensor | None,
    cross_v: Tensor | None,
    pos: Tensor,
) -> Tensor:
    """One decode step on static buffers (what ``torch.compile`` sees): writes the new
    keys/values in place at ``pos`` and returns the next-token logits ``(B, V)``."""
    cache = StaticKVCache(self_k, self_v, cross_k, cross_v, pos)
    return model.decode(tokens, cache, memory_mask)


class StaticCacheStepper:
    """A ``Stepper`` that decodes ``model`` on a static cache (see the module doc).

    Args:
        model: a ``SupportsStaticCache`` model, in eval mode.
        compile: compile the step with ``torch.compile``.
        mode: ``torch.compile`` mode (``None``: inductor's default;
            ``"reduce-overhead"``: CUDA graphs, the plan's choice on CUDA;
            ``FROZEN``: the C++ wrapper and frozen weights, the plan's choice on the CPU).
        fullgraph: refuse graph breaks when compiling.
    """

    def __init__(
        self,
        model: SupportsStaticCache,
        *,
        compile: bool = False,
        mode: str | None = None,
        fullgraph: bool = True,
    ) -> None:
        self.model = model
        self.pad_id, self.bos_id, self.eos_id = model.pad_id, model.bos_id, model.eos_id
        self.compile, self.mode, self.fullgraph = compile, mode, fullgraph
        # A compiled step compiles (and on CUDA records a graph) per batch size: beam
        # search then keeps finished sentences in the batch (``FixedBatch``).
        self.fixed_batch = compile
        self._compiled: Callable[..., Tensor] | None = None
        self._failed = False
        # Compiled steps on CUDA replay on fixed addresses: reuse buffers across calls.
        # Static addresses are for CUDA graphs; under freezing (the CPU's FROZEN mode)
        # dynamo would take a marked buffer for a constant and fold it (the position!)
        self._pool = StaticBufferPool(mark_static=mode not in FROZEN_MODES) if compile else None

    def _allocate(
        self,
        layout: CacheLayout,
        *,
        batch_size: int,
        positions: int,
        dtype: torch.dtype,
        device: torch.device,
        cross: tuple[Tensor, Tensor] | None = None,
    ) -> StaticKVCache:
        if self.compile:  # one compiled program for every length in a bucket
            positions = capacity_bucket(positions, layout.max_positions)
        return StaticKVCache.allocate(
            layout.num_layers,
            batch_size,
            layout.num_heads,
            layout.head_dim,
            capacity=positions,
            dtype=dtype,
            device=device,
            cross_k=None if cross is None else cross[0],
            cross_v=None if cross is None else cross[1],
            pool=self._pool,
        )

    def start(self, src_ids: Tensor, *, max_steps: int | None = None) -> DecoderState:
        layout = self.model.cache_layout()
        if max_steps is None or layout is None or not 1 <= max_steps <= layout.max_positions:
            return self.model.start(src_ids, max_steps=max_steps)  # the growing cache
        if self.compile and isinstance(self.model, PadsSource) and self.model.pads_source:
            # the cross-attention's keys are as long as the source: one program per bucket
            width = source_bucket(src_ids.size(1), layout.max_positions)
            src_ids = nn.functional.pad(src_ids, (0, width - src_ids.size(1)),
                                        value=self.model.pad_id)  # fmt: skip
        return self.model.start(src_ids, max_steps=max_steps, cache=self._allocate)

    def step(self, tokens: Tensor, state: DecoderState) -> tuple[Tensor, DecoderState]:
        cache = state.cache
        if not isinstance(cache, StaticKVCache):
            return self.model.step(tokens, state)
        # a compiled step guards on strides, and a prompt's last column (a strided view,
        # which .contiguous() keeps: its dims of size 1 pass as contiguous) against an
        # argmax would compile the step twice, so a fresh copy with canonical strides
        tokens = state.take_input(tokens).clone(memory_format=torch.contiguous_format)
        cache.check_room(tokens.size(1))  # host-side: an overflow would be a device error
        args = (tokens, state.memory_mask, cache.self_k, cache.self_v, cache.cross_k,
                cache.cross_v, cache.pos)  # fmt: skip
        # several tokens at once (a prompt, a draft): eager, not a compile per length
        compiled = self._compiled_step() if tokens.size(1) == 1 else None
        if compiled is None:
            logits = _static_logits(self.model, *args)
        else:
            try:
                logits = compiled(self.model, *args)
            except Exception as err:  # any compiler failure: stay correct, just slower
                warnings.warn(
                    f"StaticCacheStepper(compile=True): the compiled decode step failed "
                    f"({type(err).__name__}: {err}); decoding eagerly from now on",
                    RuntimeWarning,
                    stacklevel=2,
                )
                self._failed = True
                # Safe to redo: the step only writes this step's keys/values.
                logits = _static_logits(self.model, *args)
        cache.advance(tokens.size(1))
        return logits, state

    @property
    def fell_back(self) -> bool:
        """A compiled stepper whose step failed to compile (it decodes eagerly now)."""
        return self.compile and self._failed

    def _compiled_step(self) -> Callable[..., Tensor] | None:
        if not self.compile or self._failed:
            return None
        if self._compiled is None:  # compiled lazily, at the first step
            if self.mode in FROZEN_MODES:
                self._compiled = _compiled_call(torch.compile(
                    _static_logits, fullgraph=self.fullgraph, dynamic=False,
                    options=dict(FROZEN_MODES[self.mode]),
                ), freezing=True)  # fmt: skip
            else:
                self._compiled = _compiled_call(torch.compile(
                    _static_logits, mode=self.mode, fullgraph=self.fullgraph, dynamic=False
                ), freezing=False)  # fmt: skip
        return self._compiled


MIN_BUCKET = 64  # the smallest capacity of a compiled step's cache


def capacity_bucket(positions: int, max_positions: int) -> int:
    """``positions`` rounded up to a power of two >= ``MIN_BUCKET``, at most
    ``max_positions`` (and never below ``positions``): a compiled step's cache capacity.
    The extra positions cost a masked score each per step, a few percent of a step for
    a small LM's short contexts, against a compile for every length."""
    bucket = max(MIN_BUCKET, 1 << max(0, positions - 1).bit_length())
    return max(positions, min(bucket, max_positions))


MIN_SOURCE_BUCKET = 8  # the shortest padded source of a compiled encoder-decoder step


def source_bucket(length: int, max_positions: int) -> int:
    """A source of ``length`` tokens padded for a compiled step: the next power of two
    >= ``MIN_SOURCE_BUCKET``, at most ``max_positions`` (never below ``length``). The
    padding costs masked cross-attention scores, a small share of a beam step."""
    bucket = max(MIN_SOURCE_BUCKET, 1 << max(0, length - 1).bit_length())
    return max(length, min(bucket, max_positions))


FROZEN = "frozen"
"""``StaticCacheStepper``'s ``mode`` for inductor's C++ wrapper with frozen weights (the CPU's
compiled step: module doc); any other mode but ``FROZEN_TUNED`` is ``torch.compile``'s own."""
FROZEN_TUNED = "frozen-tuned"
"""``FROZEN`` with inductor's own GEMM templates timed against the aten kernels at compile
time (``max_autotune``, C++ and aten backends), and a weight-only int4 layer's products that
share an input concatenated into one (q/k/v, gate/up). On a 2-core AMD EPYC its AVX-512
micro-GEMMs ran SmolLM2-135M's one-token step 2.2x faster at fp32 (MKL's packed GEMV
lost to them) and 1.4x at int4 than ``FROZEN``, for a compile ~1.5x longer
(``bench/NOTES.md``): the CPU plan's compiled step."""
# Autotuning's own deprecation warning (its use of tensor.storage(), inside torch) is
# not for a user of a command that compiles: hidden, that message from that module only.
warnings.filterwarnings("ignore", message="TypedStorage is deprecated", category=UserWarning,
                        module=r"torch\._inductor\.select_algorithm")  # fmt: skip
# Inductor's options for each. Freezing takes effect only with gradients off (the
# searches' no_grad) and with the global flag set while dynamo traces (``_compiled_call``):
# the weights become constants that inductor packs (fp32, bf16) and folds.
_Options = dict[str, str | int | bool | Callable[..., Any]]
_FROZEN_OPTIONS: _Options = {"cpp_wrapper": True, "freezing": True}
FROZEN_MODES: dict[str, _Options] = {
    FROZEN: _FROZEN_OPTIONS,
    FROZEN_TUNED: {**_FROZEN_OPTIONS, "max_autotune": True,
                   "max_autotune_gemm_backends": "CPP,ATEN", "cpp.enable_concat_linear": True,
                   # the timings stay off stderr (a command's output is its own)
                   "autotune_num_choices_displayed": 0,
                   "max_autotune_report_choices_stats": False},
}  # fmt: skip


RECOMPILE_LIMIT = 64
"""Compiled programs of ``_static_logits`` kept before dynamo gives up on new shapes. Every
compiled stepper compiles that one function, once per batch size, source bucket and cache
bucket (a beam search: its first step's rows and the beams'), and dynamo's own limit (8)
counts them together per process: a file of length-sorted batches, or two models, would
pass it and decode eagerly from then on."""


def _compiled_call(compiled: Callable[..., Tensor], *, freezing: bool) -> Callable[..., Tensor]:
    """``compiled`` called with dynamo's recompile limit at least ``RECOMPILE_LIMIT`` and,
    with ``freezing``, inductor's ``freezing`` set in its global config.

    Dynamo reads that global itself when it traces (``is_parameter_freezing``): set,
    it keeps the weights as the graph's constants, which inductor then folds and
    packs; unset, it lifts them as graph inputs, which nothing freezes (and every
    call checks their guards). ``torch.compile(options=...)`` reaches inductor only,
    so the option alone freezes nothing. Both are read when a call traces, which any
    call may (a new shape), hence every call; setting and restoring costs a few us."""
    inductor, dynamo = torch._inductor.config, torch._dynamo.config

    def call(*args: Any) -> Tensor:
        frozen, limit = inductor.freezing, dynamo.recompile_limit
        inductor.freezing = freezing or frozen
        dynamo.recompile_limit = max(limit, RECOMPILE_LIMIT)
        try:
            return compiled(*args)
        finally:
            inductor.freezing, dynamo.recompile_limit = frozen, limit

    return call


CacheName = str  # "model" | "static" | "compiled"
CACHES = ("model", "static", "compiled")


def build_stepper(
    model: AnyStepper, *, one_query: bool, cache: CacheName, compile_mode: str | None = None
) -> AnyStepper:
    """The ``Stepper`` that decodes ``model`` as the inference plan decided.

    The model's attention modules get the backend (``attnkit.attention.backends``;
    they keep it until another is installed): ``one_query``: ``OneQueryDecode``
    (a decode step's one query per row as two batched GEMVs, several times
    cheaper on the CPU than the fused kernel); otherwise ``REFERENCE`` (the fused
    kernel, which inductor also fuses itself into a compiled step).

    ``cache``: ``"model"``, the model's own growing cache (which a search's
    length bound sizes once; on the CPU measured faster than the static cache's
    masked attention over its whole capacity: ``bench/NOTES.md``);
    ``"static"``: ``StaticCacheStepper`` (models that support it; others as they
    are); ``"compiled"``: the static cache, compiled with ``compile_mode``
    (``ValueError`` for a model without a static-cache step).
    """
    if cache not in CACHES:
        raise ValueError(f"cache: expected one of {', '.join(CACHES)}; got {cache!r}")
    if isinstance(model, nn.Module):
        use_backend(model, OneQueryDecode() if one_query else REFERENCE)
    if cache == "model":
        return model
    if not isinstance(model, SupportsStaticCache):
        if cache == "compiled":
            raise ValueError(f"path: {type(model).__name__} has no static-cache step to compile")
        return model
    return StaticCacheStepper(model, compile=cache == "compiled", mode=compile_mode)
