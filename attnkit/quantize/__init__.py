"""CPU inference weights: packed fp32/bf16 and int8 linears, and ``quantize_model``.

``quantize_model(model, "fp32" | "bf16" | "int8" | "int8w" | "int4")`` converts any attnkit
model in place; the converted model decodes with the same searches and
steppers as before (``attnkit.decoding``). ``bench/NOTES.md`` has the
measurements behind each choice; the README the speed/quality trade-off.
"""

from attnkit.quantize.int4 import Int4Linear
from attnkit.quantize.int8_blocks import Int8BlockLinear
from attnkit.quantize.linear import Bf16Linear, Int8Linear, PackedLinear, quantize_rows
from attnkit.quantize.model import (
    PRECISIONS,
    QuantizedTokenEmbedding,
    float_linears,
    model_bytes,
    quantize_model,
)
from attnkit.quantize.weight_only import Int8WeightOnlyLinear

__all__ = [
    "PRECISIONS",
    "Bf16Linear",
    "Int4Linear",
    "Int8BlockLinear",
    "Int8Linear",
    "Int8WeightOnlyLinear",
    "PackedLinear",
    "QuantizedTokenEmbedding",
    "float_linears",
    "model_bytes",
    "quantize_model",
    "quantize_rows",
]
