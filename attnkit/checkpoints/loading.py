"""Trained models back from disk: a checkpoint (or a run's latest) -> model + tokenizer.

The one loader of every family: the family registry (``attnkit.models.FAMILIES``)
names the config class and the model class from ``config.json``'s ``family``.
``attnkit translate``, ``evaluate``, ``attention``, ``generate``,
``fill-mask`` (and the server) load through here; nothing here touches
training state (the optimizer files are never read). Every failure is a
``CheckpointError`` naming the file; a checkpoint of a family the caller
cannot use is a ``WrongFamilyError`` that says which family it is.

A model about to be loaded is built without its random initialisation
(``build_for_loading``): every parameter is overwritten by the checkpoint, and
initialising SmolLM2-135M's 135M parameters took longer than reading them.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from attnkit.checkpoints.adapters import adapted_weights
from attnkit.checkpoints.files import CONFIG_FILE, MODEL_FILE, TOKENIZER_FILE, load_checkpoint
from attnkit.checkpoints.int4_weights import load_int4_state, read_int4_record
from attnkit.checkpoints.rundir import latest_checkpoint, resolve_checkpoint
from attnkit.data.tokenizer_kinds import Tokenizer, tokenizer_from_json
from attnkit.device import resolve_device
from attnkit.errors import CheckpointError, ConfigError
from attnkit.models.config_base import ModelConfig
from attnkit.models.registry import KIND_NAMES, Family, ModelKind, family_of, get_family

# torch.nn.init's random initialisers (each dispatches through the torch-function
# mode itself), and the tensor methods they end in. Deterministic fills still run.
_RANDOM_INIT = frozenset(
    {
        nn.init.uniform_, nn.init.normal_, nn.init.trunc_normal_, nn.init.xavier_uniform_,
        nn.init.xavier_normal_, nn.init.kaiming_uniform_, nn.init.kaiming_normal_,
        nn.init.orthogonal_, nn.init.sparse_, torch.Tensor.uniform_, torch.Tensor.normal_,
    }
)  # fmt: skip


class _SkipRandomInit(torch.overrides.TorchFunctionMode):
    """Within this mode, random in-place initialisations leave their tensor as it is.

    Only for building a model whose parameters a strict ``load_state_dict``
    overwrites next: the memory is ``torch.empty``'s until then. Buffers in
    attnkit (position tables, ALiBi slopes) are computed, never drawn, so
    they come out right. The RNG is not advanced.
    """

    def __torch_function__(
        self,
        func: Callable[..., object],
        types: Collection[type],
        args: Sequence[object] = (),
        kwargs: Mapping[str, object] | None = None,
    ) -> object:
        if func in _RANDOM_INIT:
            return args[0] if args else (kwargs or {})["tensor"]
        return func(*args, **(kwargs or {}))


def build_for_loading(config: ModelConfig) -> nn.Module:
    """The family's model for ``config`` with parameters left uninitialised (see the module
    doc): load a state dict into it before use."""
    with _SkipRandomInit():
        return family_of(config).model_class(config)


def _check_fits(config: ModelConfig, config_file: Path, device: torch.device) -> None:
    """Refuse, before building, a model whose config asks for more memory than there is
    (``max_len: 10**12`` would allocate its position table until the kernel kills us)."""
    from attnkit.memory_estimates import model_bytes, require

    try:
        need = model_bytes(config, build_for_loading)
    except ConfigError as e:
        raise CheckpointError(f"{config_file}: {e}") from None
    require(need, f"{config_file}: this model", error=CheckpointError)
    if device.type != "cpu":
        require(need, f"{config_file}: this model", device=device, error=CheckpointError)


class WrongFamilyError(CheckpointError):
    """The checkpoint is fine, but of a family the caller does not decode."""

    def __init__(self, message: str, family: Family) -> None:
        super().__init__(message)
        self.family = family


@dataclass
class LoadedModel:
    """A model in eval mode with everything needed to feed it text."""

    model: Any  # the family's model class (EncoderDecoder, DecoderOnlyLM, ...)
    tokenizer: Any  # a Tokenizer; None for a family that reads no text (images)
    family: Family
    directory: Path
    weights: str = "fp32"  # "int4": linears loaded as the int4 blocks stored (int4_weights)

    @property
    def config(self) -> Any:
        return self.model.config


def load_model_state(model: nn.Module, state: Mapping[str, Tensor], *, source: Path) -> None:
    """Strictly load ``state`` into ``model``; a mismatch raises ``CheckpointError``.

    A vocabulary or width mismatch shows up as a shape difference; a checkpoint
    of another architecture as missing/unexpected keys.
    """
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise CheckpointError(
            f"{source}: does not fit the model its {CONFIG_FILE} describes: missing "
            f"{missing[:4]}, unexpected {unexpected[:4]}; the weights and {CONFIG_FILE} "
            "come from different models"
        )
    for key, value in state.items():
        if value.shape != expected[key].shape:
            raise CheckpointError(
                f"{source}: {key} has shape {tuple(value.shape)} but the model built from "
                f"{CONFIG_FILE} expects {tuple(expected[key].shape)}; the weights and "
                f"{CONFIG_FILE} come from different models (another size or vocabulary)"
            )
    model.load_state_dict(state, strict=True)


def load_tokenizer(run_or_checkpoint: str | Path) -> Tokenizer | None:
    """The tokenizer saved in a checkpoint or a run's latest one (None if there is none)."""
    path = Path(run_or_checkpoint)
    directory = path if (path / TOKENIZER_FILE).exists() else latest_checkpoint(path)
    if directory is None:
        return None
    text = load_checkpoint(directory, load_optimizer=False).tokenizer_json
    return None if text is None else tokenizer_from_json(text)


def _a(noun: str) -> str:
    return f"an {noun}" if noun[0] in "aeiou" else f"a {noun}"


def load_model(
    path: str | Path,
    device: str | torch.device | None = None,
    *,
    kinds: Collection[ModelKind] | None = None,
    base: str | Path | None = None,
) -> LoadedModel:
    """The model of a checkpoint (or of a run's latest checkpoint), in eval mode.

    ``kinds`` limits the families accepted (``"seq2seq"``, ``"causal_lm"``,
    ``"masked_lm"``); another family raises ``WrongFamilyError``. A LoRA
    checkpoint (``attnkit.checkpoints.adapters``) comes back with its adapters
    merged into its base's weights; ``base`` names that base checkpoint in place
    of the recorded path (it must still have the recorded hash). A checkpoint
    stored as int4 blocks (``attnkit.checkpoints.int4_weights``) comes back with
    those linears as ``Int4Linear`` (``weights="int4"``) on the CPU, and as float
    linears holding exactly the stored weights on another device.
    """
    directory = resolve_checkpoint(path)
    state = load_checkpoint(directory, load_optimizer=False)
    config_file = directory / CONFIG_FILE
    try:
        family = get_family(state.config.get("family", "transformer"))
    except ConfigError as e:
        raise CheckpointError(f"{config_file}: {e}") from None
    if kinds is not None and family.kind not in kinds:
        wanted = " or ".join(KIND_NAMES[kind] for kind in kinds)
        raise WrongFamilyError(
            f"{config_file}: this is a {family.name} checkpoint ({_a(KIND_NAMES[family.kind])}), "
            f"not a {wanted}",
            family,
        )
    try:
        config = family.config_class.from_dict(state.config)
    except ConfigError as e:
        raise CheckpointError(f"{config_file}: {e}") from None
    tokenizer = None
    if family.vocab_field is not None:  # a text model: its tokenizer must fit its vocabulary
        if state.tokenizer_json is None:
            raise CheckpointError(f"{directory / TOKENIZER_FILE}: missing; cannot read text")
        tokenizer = tokenizer_from_json(state.tokenizer_json)
        # A model may have more rows than the tokenizer has ids (its vocabulary size set
        # larger in the run config, or an MLM's mask id), never fewer.
        model_vocab = getattr(config, family.vocab_field)
        if tokenizer.vocab_size > model_vocab:
            raise CheckpointError(
                f"{directory / TOKENIZER_FILE}: vocabulary of {tokenizer.vocab_size} does not "
                f"fit the model's {family.vocab_field}={model_vocab}; the tokenizer and the "
                "weights come from different runs (use the tokenizer.json saved with them)"
            )
    target = resolve_device(device)
    _check_fits(config, config_file, target)
    model = build_for_loading(config)
    # A LoRA checkpoint (adapter.json): its base's weights, then its adapters, merged.
    adapted = adapted_weights(directory, state.model_state, set(model.state_dict()), base=base)
    int4 = read_int4_record(directory)
    weights = "fp32"
    if adapted is not None:
        load_model_state(model, adapted.model_state, source=adapted.source)
        adapted.install(model, merge=True)
    elif int4 is not None:
        load_int4_state(model, state.model_state, int4, source=directory / MODEL_FILE)
        weights = "int4"
        if target.type != "cpu":  # the int4 kernel is a CPU kernel: the exact float weights
            from attnkit.quantize import float_linears

            float_linears(model)
            weights = "fp32"
    else:
        load_model_state(model, state.model_state, source=directory / MODEL_FILE)
    model = model.to(target).eval()
    return LoadedModel(model=model, tokenizer=tokenizer, family=family, directory=directory,
                       weights=weights)  # fmt: skip
