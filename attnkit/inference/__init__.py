"""How a checkpoint runs: the inference plan (``make_plan``) and ``prepare``.

``make_plan(checkpoint, machine, options)`` decides precision, kernels,
attention backend, cache, engine and the device-dependent search settings in
one place; ``prepare(loaded, plan)`` returns what decodes. ``stepper_for``
is the short way for a model in hand (its weights kept as they are).
"""

from attnkit.decoding.common import SearchSettings
from attnkit.inference.plan import (
    ATTNKIT,
    PATHS,
    CheckpointInfo,
    InferencePlan,
    Machine,
    Options,
    make_plan,
)
from attnkit.inference.prepare import (
    EngineOpener,
    convert,
    plan_for_model,
    prepare,
    stepper,
    stepper_for,
    translate_texts,
)

__all__ = [
    "ATTNKIT",
    "PATHS",
    "CheckpointInfo",
    "EngineOpener",
    "InferencePlan",
    "Machine",
    "Options",
    "SearchSettings",
    "convert",
    "make_plan",
    "plan_for_model",
    "prepare",
    "stepper",
    "stepper_for",
    "translate_texts",
]
