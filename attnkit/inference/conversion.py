"""The weights' conversion an inference plan names, apart from the plan itself.

``convert_weights(model, linears=..., precision=..., weights=...)`` converts a
model's linears in place as the plan's ``linears`` field says (``attnkit.quantize``).
``attnkit.inference.prepare.convert`` hands it a plan's fields; ``--compile auto``
(``attnkit.inference.compile_choice``, which the plan consults) converts copies
with it while the plan is being made, so this module knows nothing of the plan.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn

if TYPE_CHECKING:
    from attnkit.data.tokenizer_kinds import Tokenizer


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
