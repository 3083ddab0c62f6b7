"""What an inference plan's fields make of a model, apart from the plan itself.

``convert_weights(model, linears=..., precision=..., weights=...)`` converts a
model's linears in place as the plan's ``linears`` field says (``attnkit.quantize``);
``plan_stepper(model, plan)`` builds the stepper its attention, cache and compile
fields name. ``attnkit.inference.prepare`` calls both with a plan; ``--compile auto``
(``attnkit.inference.compile_choice``, which the plan consults) calls them on copies
while the plan is being made, so this module knows the plan only as ``StepPlan``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, cast

from torch import nn

from attnkit.decoding.protocol import AnyStepper
from attnkit.decoding.static import build_stepper

if TYPE_CHECKING:
    from attnkit.data.tokenizer_kinds import Tokenizer


class StepPlan(Protocol):
    """The fields of an inference plan (``attnkit.inference.plan.InferencePlan``) that
    say how the weights are converted and the stepper built, and at how many rows."""

    @property
    def precision(self) -> str: ...
    @property
    def linears(self) -> str: ...
    @property
    def weights(self) -> str: ...
    @property
    def attention(self) -> str: ...
    @property
    def cache(self) -> str: ...
    @property
    def compile_mode(self) -> str | None: ...
    @property
    def rows(self) -> int: ...


def plan_stepper(model: AnyStepper | nn.Module, plan: StepPlan) -> AnyStepper:
    """The stepper of an already converted ``model``: the plan's attention backend,
    cache and compile mode (``attnkit.decoding.static.build_stepper``)."""
    return build_stepper(cast("AnyStepper", model), one_query=plan.attention == "one-query",
                         cache=plan.cache, compile_mode=plan.compile_mode)  # fmt: skip


def convert_weights(
    model: nn.Module,
    *,
    linears: str,
    precision: str,
    weights: str = "fp32",
    tokenizer: Tokenizer | None = None,
) -> nn.Module:
    """``model`` with its weights converted in place for ``linears``; returns it.

    ``linears``: ``as-loaded``, ``engine`` (nothing to do), ``packed``/``plain``
    (fp32), ``bf16``, ``bf16-plain``, ``int8``, ``int8-smooth``, ``int8w``,
    ``int4``, ``int4-awq`` (the calibrated two need the ``tokenizer``).
    A model loaded as int4 blocks (``weights="int4"``) run at another
    ``precision`` first gets float linears holding exactly the stored weights.
    """
    if weights == "int4" and precision != "int4" and linears != "engine":
        from attnkit.quantize import float_linears

        float_linears(model)
    if linears in ("as-loaded", "engine"):
        return model
    from attnkit.quantize import quantize_model

    if linears in ("packed", "plain"):
        return quantize_model(model, "fp32", pack_fp32=linears == "packed")
    if linears == "bf16-plain":  # a compiled step's bf16: inductor packs the weights
        return quantize_model(model, "bf16", pack_fp32=False)
    if linears in ("int8-smooth", "int4-awq"):
        from attnkit.quantize.smooth import lm_calibration

        if tokenizer is None:
            raise ValueError(f"{linears}: the plan calibrates with the tokenizer; none given")
        calibrated = "int8" if linears == "int8-smooth" else "int4"
        return quantize_model(model, calibrated, calibrate=lm_calibration(tokenizer))
    return quantize_model(model, linears)
