"""``prepare(loaded, plan)``: what decodes, made as the inference plan says.

For attnkit itself: the weights converted in place (``attnkit.quantize``: the
plan's ``linears``), then the stepper (``attnkit.decoding.static.build_stepper``:
the plan's attention backend, cache and compile mode); for a model without a
decode step (masked LM, image classifier), the converted model itself.

Another engine (CTranslate2, onnxruntime, llama.cpp) lives in
``attnkit.interop``, which the library never imports (``tests/test_import_graph.py``):
so ``prepare`` takes the engines as ``openers``, handed in at the edge, by
the command or the server that may import them (``attnkit.cli.inference_args``).
An opener gets the plan and a way to load the checkpoint on the CPU (called
only when the engine must convert it: a cache miss), so the engine path still
never loads a checkpoint it does not need.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from torch import nn

from attnkit.decoding.protocol import AnyStepper
from attnkit.inference.conversion import convert_weights, plan_stepper
from attnkit.inference.plan import ATTNKIT, CheckpointInfo, InferencePlan, Machine, Options
from attnkit.inference.plan import make_plan as make_plan

if TYPE_CHECKING:
    from attnkit.checkpoints.loading import LoadedModel
    from attnkit.data.tokenizer_kinds import Tokenizer


class EngineOpener(Protocol):
    """Opens another engine for the plan; ``load()`` loads the checkpoint on the CPU
    (for a conversion). Returns the engine (an object the command knows how to call)."""

    def __call__(self, plan: InferencePlan, load: Callable[[], LoadedModel]) -> object: ...


def convert(model: nn.Module, plan: InferencePlan, tokenizer: Tokenizer | None = None) -> nn.Module:
    """``model`` with its weights converted in place for ``plan.linears``; returns it
    (``attnkit.inference.conversion.convert_weights`` with the plan's fields)."""
    return convert_weights(model, linears=plan.linears, precision=plan.precision,
                           weights=plan.weights, tokenizer=tokenizer)  # fmt: skip


def stepper(model: AnyStepper | nn.Module, plan: InferencePlan) -> AnyStepper:
    """The stepper of an already converted ``model`` (``plan.has_stepper``)."""
    return plan_stepper(model, plan)


stepper_of = stepper  # the name inside functions whose ``stepper`` is an argument


def prepare(
    loaded: LoadedModel | Callable[[], LoadedModel],
    plan: InferencePlan,
    *,
    openers: Mapping[str, EngineOpener] | None = None,
) -> object:
    """What decodes, as ``plan`` says: a ``Stepper``, a converted model (no decode
    step), or another engine opened by ``openers[plan.engine]``.

    ``loaded``: the checkpoint, or a function loading it (another engine calls it
    only to convert). The model is converted in place.
    """
    if plan.engine != ATTNKIT:
        opener = (openers or {}).get(plan.engine)
        if opener is None:
            raise ValueError(f"engine {plan.engine!r}: no opener handed in")
        if callable(loaded):
            return opener(plan, loaded)
        ready = loaded
        return opener(plan, lambda: ready)
    ready = loaded() if callable(loaded) else loaded
    model = convert(ready.model, plan, ready.tokenizer)
    return stepper(model, plan) if plan.has_stepper else model


def plan_for_model(
    model: AnyStepper | nn.Module, path: str = "fast", kind: str = ""
) -> InferencePlan:
    """The plan of a model in hand, weights kept as they are: its device's attention
    backend, cache and search settings (library callers, tests, benchmarks). A
    stepper that is no module (a wrapper) counts as on the CPU."""
    machine = Machine.of(model) if isinstance(model, nn.Module) else Machine.here("cpu")
    return make_plan(CheckpointInfo.of(model, kind), machine, Options(path=path, convert=False))


def stepper_for(model: AnyStepper | nn.Module, path: str = "fast") -> AnyStepper:
    """The ``Stepper`` to decode ``model`` with on ``path`` (``fast``, ``compiled``,
    ``reference``), weights kept as they are: ``stepper(model, plan_for_model(model, path))``.
    ``ValueError`` for ``compiled`` on a model without a static-cache step."""
    from attnkit.errors import UsageError

    try:
        plan = plan_for_model(model, path)
    except UsageError:  # a library caller's mistake: a ValueError, as before
        raise ValueError(
            f"path: {type(model).__name__} has no static-cache step to compile"
        ) from None
    return stepper(model, plan)


def translate_texts(
    model: nn.Module,
    tokenizer: Tokenizer,
    texts: Sequence[str],
    *,
    stepper: AnyStepper | None = None,
    **options: Any,
) -> list[str]:
    """``attnkit.decoding.text.translate_texts`` on the plan of the model in hand: its
    device's search settings and (unless ``stepper`` is given) stepper, the weights as
    they are. For validation during training, quickstart and library callers."""
    from attnkit.decoding import text

    plan = plan_for_model(model)
    chosen = stepper_of(model, plan) if stepper is None else stepper
    return text.translate_texts(model, tokenizer, texts, stepper=chosen, search=plan.search,
                                **options)  # fmt: skip
