"""SmoothQuant (Xiao et al., 2023) for ``quantize_model(..., "int8")``: calibration.

Dynamic int8 quantises a linear's input with one scale for the whole tensor,
so one outlier channel (Llama-type models have a few, 10-100x the others)
leaves the other channels a handful of int8 levels: on SmolLM2-135M plain
int8 keeps fp32's top-1 token at 112 of 128 teacher-forced positions
(``bench/int8_agreement.py``). SmoothQuant moves that range into the weight,
which is quantised per output row and so tolerates it: each input channel
``j`` is divided by

    s_j = max|x_j| ** alpha / max|W_:,j| ** (1 - alpha)

and the weight's column ``j`` multiplied by it, which leaves ``x W^T``
unchanged in exact arithmetic. ``max|x_j|`` comes from calibration: a
few forward passes of the float model (``quantize_model``'s ``calibrate``; for a
language model ``lm_calibration``: ordinary text), recorded per linear by
``input_maxima``. ``Int8Linear(..., smooth=s)`` applies it.

Shapes: ``K`` a linear's input width.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import torch
from torch import Tensor, nn

DEFAULT_ALPHA = 0.5
"""The paper's default migration strength (0 = all range left in the activations)."""

# Calibration text for language models: ordinary prose on unrelated topics (outlier
# channels are a property of the model, not of the text; a few hundred tokens find them).
CALIBRATION_TEXTS = (
    "The river rose through the night, and by morning the lower fields were under water. "
    "Farmers moved their animals to the hill behind the church and waited.",
    "To compute the area of a circle, multiply pi by the square of the radius. A circle "
    "with a radius of 3 centimetres has an area of about 28.3 square centimetres.",
    "Dear team, the meeting on Thursday is moved to 10:30 in room 4B. Please bring the "
    "quarterly figures and your questions about the new schedule.",
    "Photosynthesis turns light, water and carbon dioxide into sugar and oxygen. It takes "
    "place in the chloroplasts of plant cells.",
    "def mean(values):\n    return sum(values) / len(values)\n\nprint(mean([1, 2, 3, 4]))",
    "She asked him why the train was late again; he said a tree had fallen on the line "
    "near the old mill, and nobody knew when it would be cleared.",
)


class Encodes(Protocol):
    """What calibration needs of a tokenizer."""

    def encode(self, text: str) -> list[int]: ...


def record_inputs(
    model: nn.Module,
    linears: Sequence[nn.Module],
    run: Callable[[nn.Module], object],
    record: Callable[[nn.Module, Tensor], None],
) -> None:
    """Calibration: ``run(model)`` in inference mode with ``record(linear, x)`` called on
    the input ``x`` ``(..., K)`` (the very tensor, as the linear receives it) of every
    call of each of ``linears``; the hooks are removed afterwards, whatever happens.
    SmoothQuant's maxima (``input_maxima``) and AWQ's samples (``attnkit.quantize.awq``)
    are both recorded this way."""

    def hook(module: nn.Module, args: tuple[Tensor, ...]) -> None:
        record(module, args[0])

    handles = [linear.register_forward_pre_hook(hook) for linear in linears]
    try:
        with torch.inference_mode():
            run(model)
    finally:
        for handle in handles:
            handle.remove()


def input_maxima(
    model: nn.Module, linears: Sequence[nn.Linear], run: Callable[[nn.Module], object]
) -> dict[int, Tensor]:
    """``max|x_j|`` ``(K,)`` over every input row each of ``linears`` saw while ``run(model)``.

    Keyed by ``id(linear)`` (a linear shared by two owners is one entry); a
    linear that ``run`` never reached is absent.
    """
    maxima: dict[int, Tensor] = {}

    def record(module: nn.Module, x: Tensor) -> None:
        x = x.detach().float()
        m = x.reshape(-1, x.size(-1)).abs().amax(0)
        key = id(module)
        maxima[key] = torch.maximum(maxima[key], m) if key in maxima else m

    record_inputs(model, linears, run, record)
    return maxima


def lm_calibration(
    tokenizer: Encodes, texts: Sequence[str] = CALIBRATION_TEXTS
) -> Callable[[nn.Module], None]:
    """A ``calibrate`` for ``quantize_model``: a causal language model (``model(ids)``)
    reads each of ``texts`` once (cut to the model's ``config.max_len``)."""

    def run(model: nn.Module) -> None:
        device = next(model.parameters()).device
        limit = int(getattr(getattr(model, "config", None), "max_len", 0) or 1 << 30)
        for text in texts:
            ids = tokenizer.encode(text)[:limit]
            if ids:
                model(torch.tensor([ids], dtype=torch.long, device=device))

    return run


def smoothing_factors(weight: Tensor, x_max: Tensor, alpha: float = DEFAULT_ALPHA) -> Tensor:
    """``s`` ``(K,)`` for a weight ``(N, K)`` and its input's ``max|x_j|`` ``(K,)``.

    Clamped away from zero on both sides: a channel that calibration never saw
    non-zero (or a zero weight column) gets a finite factor.
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha: expected a value in [0, 1], got {alpha}")
    w_max = weight.detach().float().abs().amax(0).clamp(min=1e-5)
    s = x_max.float().clamp(min=1e-5).pow(alpha) / w_max.pow(1.0 - alpha)
    return s.clamp(min=1e-5)
