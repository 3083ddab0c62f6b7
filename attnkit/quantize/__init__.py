"""CPU inference: packed fp32/bf16 and int8 linears, ``quantize_model``, a CPU decode stepper.

Prototype for issue 12 (CPU decoding faster than CTranslate2 int8); see
``bench/NOTES.md`` for the measurements behind each choice.
"""

from attnkit.quantize.linear import Int8Linear, PackedLinear, quantize_rows
from attnkit.quantize.model import (
    PRECISIONS,
    QuantizedTokenEmbedding,
    SplitCrossAttention,
    model_bytes,
    quantize_model,
)
from attnkit.quantize.stepper import CpuState, CpuStepper, project_q

__all__ = [
    "CpuState",
    "CpuStepper",
    "PRECISIONS",
    "Int8Linear",
    "PackedLinear",
    "QuantizedTokenEmbedding",
    "SplitCrossAttention",
    "model_bytes",
    "quantize_model",
    "project_q",
    "quantize_rows",
]
