"""``import --from gguf --keep-quantized``: a file's Q4_0/Q4_1/Q8_0 blocks kept as linears.

``read_gguf(..., keep_quantized=True)`` hands Q4_0/Q4_1/Q8_0 matrices over as records
of their blocks (``attnkit.interop.gguf.blocks``); the import's key table moves
their rows as it moves float weights. Here, around that table:

* ``settle_records`` (before it): a record stays one only where it becomes a
  linear the int4 kernel takes (``kept_linears``: a converted linear of the
  model, not tied to the embedding, output rows a multiple of 16) and every
  tensor stacked into that linear is a record of the same kind, Q4 or Q8 (a
  fused q/k/v whose v is Q6_K, or Q8_0 beside Q4_1 q and k, is dequantized
  whole). The rest is dequantized to float32, exactly as without the option,
  with one note per kind of tensor;
* ``keep_tied_heads`` (before it): an output head tied to the token table
  (``tied_heads``) keeps the table's record, and the table itself is
  dequantized for its lookups: the two are untied in the checkpoint, with the
  same weights;
* ``int4_entries`` (after it): each remaining Q4 record becomes ``Int4Linear``'s
  stored form (``weight_int4``, ``weight_scale``, ``weight_zero``), each Q8 one
  ``Int8BlockLinear``'s (``weight_int8``, ``weight_scale``: a scale per 32 weights,
  run on the int4 kernel as two nibble planes, ``attnkit.quantize.int8_blocks``),
  and the checkpoint's ``int4.json`` (``attnkit.checkpoints.int4_weights``) names it.

Other block types keep today's path (dequantized): the k-quants have no exact
form for the int4 kernel.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

import torch
from torch import Tensor, nn

from attnkit.checkpoints.int4_weights import Int4Record
from attnkit.checkpoints.loading import build_for_loading
from attnkit.interop.gguf.blocks import (
    BLOCK,
    KEPT_TYPES,
    codes,
    dequantize_record,
    int8_codes,
    is_q8_record,
    is_record,
)
from attnkit.kernels.torch_ops import INT4_N_MULTIPLE
from attnkit.models.lm_config import DecoderOnlyConfig
from attnkit.models.registry import family_of
from attnkit.quantize.int4 import pack_nibbles
from attnkit.quantize.model import convertible_linears

_FLOAT_TYPES = ("F32", "F16", "BF16")


def _meta_model(config: DecoderOnlyConfig) -> nn.Module:
    """The model ``config`` builds, on the meta device (no memory), or else uninitialised
    (``build_for_loading``: pages never written)."""
    try:
        with torch.device("meta"):
            return family_of(config).model_class(config)
    except (NotImplementedError, RuntimeError):  # e.g. .item() of a meta tensor
        return build_for_loading(config)


def _fits(weight: Tensor) -> bool:
    n, k = weight.shape
    return n % INT4_N_MULTIPLE == 0 and k % BLOCK == 0


def kept_linears(config: DecoderOnlyConfig) -> dict[str, str]:
    """Our weight key -> module name, for every linear of the model ``config`` builds that
    can hold blocks (module doc), tied ones left out (``tied_heads``)."""
    model = _meta_model(config)
    names = {id(m): name for name, m in model.named_modules()}
    shared = Counter(id(p) for _, p in model.named_parameters(remove_duplicate=False))
    out: dict[str, str] = {}
    for linear in convertible_linears(model):
        if shared[id(linear.weight)] == 1 and _fits(linear.weight):
            out[f"{names[id(linear)]}.weight"] = names[id(linear)]
    return out


def tied_heads(config: DecoderOnlyConfig) -> dict[str, str]:
    """Our weight key of each output linear tied to a token table that can hold blocks ->
    the table's key. Such a head keeps the table's blocks (``keep_tied_heads``): a
    step reads the whole head but one row of the table, so the table is dequantized for
    lookups and the head multiplies by the file's blocks, as llama.cpp does."""
    model = _meta_model(config)
    keys: dict[int, list[str]] = {}
    for key, p in model.named_parameters(remove_duplicate=False):
        keys.setdefault(id(p), []).append(key)
    names = {id(m): name for name, m in model.named_modules()}
    out: dict[str, str] = {}
    for linear in convertible_linears(model):
        head = f"{names[id(linear)]}.weight"
        others = [k for k in keys[id(linear.weight)] if k != head]
        if others and _fits(linear.weight):
            out[head] = others[0]
    return out


def keep_tied_heads(
    heads: Mapping[str, str], tensors: Mapping[str, Tensor], sources: Mapping[str, list[str]]
) -> dict[str, Tensor]:
    """Our head key -> the record of the table it is tied to (``tied_heads``), where the
    file holds that table as one record (taken before ``settle_records`` dequantizes it
    for the lookups)."""
    out: dict[str, Tensor] = {}
    for head, table in heads.items():
        theirs = sources.get(table, [])
        if len(theirs) == 1 and is_record(tensors[theirs[0]]):
            out[head] = tensors[theirs[0]]
    return out


def settle_records(
    tensors: dict[str, Tensor],
    sources: Mapping[str, list[str]],
    kept: Mapping[str, str],
    types: Mapping[str, str],
) -> list[str]:
    """Dequantize in ``tensors`` (their keys) every record that will not become an int4
    linear (module doc); returns the notes. ``sources``: our key -> their keys (the
    load plan's); ``types``: their key -> ggml type."""
    why: Counter[str] = Counter()
    for ours, theirs in sources.items():
        records = [key for key in theirs if is_record(tensors[key])]
        if not records:
            continue
        if ours not in kept:
            reason = "not an int4-kernel linear (an embedding, a tied or odd-shaped matrix)"
        elif len(records) < len(theirs) or len({is_q8_record(tensors[k]) for k in records}) > 1:
            reason = "stacked with tensors of other types into one linear"
        else:
            continue
        for key in records:
            tensors[key] = dequantize_record(tensors[key])
            why[f"{types[key]}: {reason}"] += 1
    unkept = Counter(
        kind for key, kind in types.items() if key in tensors and not is_record(tensors[key])
    )
    notes = [f"--keep-quantized: {n} tensor(s) {r}; dequantized to float32" for r, n in why.items()]
    for kind, n in sorted(unkept.items()):
        if kind not in (*_FLOAT_TYPES, *KEPT_TYPES):
            notes.append(f"--keep-quantized: {n} {kind} tensor(s) have no exact form for "
                         "the int4 kernel; dequantized to float32")  # fmt: skip
    return notes


def int4_entries(
    state: dict[str, Tensor], kept: Mapping[str, str], source: str
) -> tuple[Int4Record | None, dict[str, object]]:
    """Replace every record in ``state`` (our keys) by ``Int4Linear``'s stored form (a
    Q8 record: ``Int8BlockLinear``'s); returns the ``int4.json`` record (None if
    nothing was kept) and facts for ``import.json``: linears, groups, and how many
    scales and zeros the kernel's bf16 copy rounds (the stored values stay exact)."""
    linears: list[str] = []
    int8: list[str] = []
    groups = rounded_scales = rounded_zeros = 0
    for key in [k for k, t in state.items() if is_record(t)]:
        name = kept[key]  # settle_records left records only there
        if is_q8_record(state[key]):
            q8, scale = int8_codes(state.pop(key))
            state[f"{name}.weight_int8"] = q8
            state[f"{name}.weight_scale"] = scale
            int8.append(name)
            groups += scale.numel()
            rounded_scales += int((scale.to(torch.bfloat16).float() != scale).sum())
            continue
        q, scale, zero = codes(state.pop(key))
        state[f"{name}.weight_int4"] = pack_nibbles(q)
        state[f"{name}.weight_scale"] = scale
        state[f"{name}.weight_zero"] = zero
        linears.append(name)
        groups += scale.numel()
        rounded_scales += int((scale.to(torch.bfloat16).float() != scale).sum())
        rounded_zeros += int((zero.to(torch.bfloat16).float() != zero).sum())
    if not linears and not int8:
        return None, {}
    facts: dict[str, object] = {
        "linears": len(linears) + len(int8),
        "int8_block_linears": len(int8),
        "groups": groups,
        "kernel_bf16_rounded_scales": rounded_scales,
        "kernel_bf16_rounded_zeros": rounded_zeros,
    }
    return Int4Record(tuple(linears), BLOCK, source, tuple(int8)), facts
