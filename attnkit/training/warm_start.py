"""Start a run from a checkpoint (``attnkit train --init CKPT``, transfer learning):
one ``WarmStart`` object, worked out once and read by everyone who needs it.

``CKPT`` is any attnkit checkpoint or run directory (its latest checkpoint):
a trained run of any family, or what ``attnkit import --from hf/gguf`` wrote.
The architecture and the tokenizer come from it; the optimizer, the schedule
and the step count start fresh (``--resume`` is what continues a run).
("Warm start", not "init": weight *initialisation* is ``attnkit.models.builders``.)

Who reads the ``WarmStart``:

* ``warm_start_for_run(run, out, init=..., resume=...)``: the one place the
  new-run / resume / LoRA policy lives (``attnkit train`` only passes its
  arguments); it records the source in ``run.init``;
* the task: the model config (``config_from_start``: the checkpoint's, with
  the run's training-only keys), the ``tokenizer`` it brings, and the weights
  (``WarmStart.load_weights``: which then knows the task's ``head`` prefixes
  and the parameters that start ``fresh``);
* LoRA (``attnkit.training.weights``): ``base`` (the checkpoint's path and
  digest, for ``adapter.json``) and ``fresh`` (what trains in full), without
  reopening the checkpoint;
* the CLI's start line: ``describe()``.

The API::

    start = load_warm_start("runs/minilm")        # config, weights, tokenizer, source
    config = config_from_start(start.config, given={"dropout": 0.0})
    model = build_model(config)
    start.load_weights(model, head=("classifier",))  # start.fresh: what the head lacked

* ``load_warm_start(path, expected_sha256=None) -> WarmStart``: the
  checkpoint's model config, its state dict (CPU tensors), its tokenizer
  (``None`` for images) and an ``InitSource`` (where it came from: the path as
  given, the checkpoint directory, the content sha256 of its
  ``model.safetensors`` (``attnkit.checkpoints.digest``), the family, the
  trainer step). ``expected_sha256`` refuses a file that has changed.
* ``config_from_start(init_config, given, ...)``: the checkpoint's config
  with the run's ``model`` section applied. A key that would change the
  architecture is a ``ConfigError`` naming it (``model.d_model: 256 would
  change the architecture of the --init checkpoint (384)``); a key equal to
  the checkpoint's value is fine, so a run may repeat its old model section;
  ``NON_ARCHITECTURE_KEYS`` (dropout, ...) may change; a task's head fields
  (the classes of a classifier) may change, and the head is then rebuilt.
* ``WarmStart.load_weights(model, head=..., restart=...)``: copy the weights
  into a freshly built model; parameters under the ``head`` module prefixes
  that the checkpoint lacks, or has with another shape, or that sit under
  ``restart`` (new labels), keep their fresh initialisation (recorded in
  ``fresh``); any other difference is a ``CheckpointError``.

The record ``InitSource.to_dict()`` goes into the run's ``run.json`` and into
every checkpoint's trainer state (the run config's ``init``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import Tensor, nn

from attnkit.checkpoints.adapters import BaseReference, read_adapter_info
from attnkit.checkpoints.digest import weights_digest
from attnkit.checkpoints.files import MODEL_FILE, TRAINER_FILE, load_checkpoint
from attnkit.checkpoints.finite import check_finite
from attnkit.checkpoints.int4_weights import read_int4_record
from attnkit.checkpoints.rundir import latest_checkpoint, resolve_checkpoint
from attnkit.data.tokenizer_kinds import tokenizer_from_json
from attnkit.data.tokenizers import Tokenizer
from attnkit.errors import CheckpointError, ConfigError, UsageError
from attnkit.models.config_base import ModelConfig
from attnkit.models.registry import get_family
from attnkit.training.config_sections import InitConfig
from attnkit.training.runconfig import RunConfig


@dataclass(frozen=True)
class InitSource:
    """Where a run's weights came from.

    Attributes:
        path: the path as given (``--init``).
        checkpoint: the checkpoint directory it resolved to (absolute).
        sha256: content digest of that checkpoint's ``model.safetensors`` (``weights_digest``).
        family: the model family (``encoder_only``, ``transformer``, ...).
        step: the trainer step of that checkpoint (``None`` for an import).
    """

    path: str
    checkpoint: str
    sha256: str
    family: str
    step: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def describe(self) -> str:
        step = "an import" if self.step is None else f"step {self.step}"
        return f"{self.checkpoint} ({self.family}, {step}, sha256 {self.sha256[:12]})"


@dataclass
class WarmStart:
    """A checkpoint a run starts from (see the module doc).

    Attributes:
        config: the checkpoint's model config.
        state: its state dict (CPU tensors).
        tokenizer: the tokenizer it brings (``None``: an image model).
        source: where it came from (path, directory, digest, family, step).
        head: the task's head prefixes, known once ``load_weights`` ran.
        fresh: the state-dict entries that start fresh (the checkpoint has none
            that fit), known once ``load_weights`` ran (``None`` before).
    """

    config: ModelConfig
    state: dict[str, Tensor]
    tokenizer: Tokenizer | None
    source: InitSource
    head: tuple[str, ...] = ()
    fresh: tuple[str, ...] | None = None

    @property
    def base(self) -> BaseReference:
        """The checkpoint as a LoRA checkpoint records its base: directory and digest."""
        return BaseReference(self.source.checkpoint, self.source.sha256)

    def load_weights(
        self, model: nn.Module, *, head: Collection[str] = (), restart: Collection[str] = ()
    ) -> list[str]:
        """Copy the checkpoint's weights into ``model`` (built from ``config_from_start``);
        returns, and records in ``fresh``, the entries that keep their fresh initialisation.

        ``head``: module prefixes that may be missing from the checkpoint, extra in
        it or of another shape; ``restart``: prefixes (inside ``head``) that start
        fresh even where the checkpoint has them (a classifier's new labels).
        Every other mismatch is a ``CheckpointError``.
        """
        state = {k: v for k, v in self.state.items() if not _under(k, restart)}
        source = Path(self.source.checkpoint) / MODEL_FILE
        fresh = copy_weights(model, state, source=source, head=head)
        self.head, self.fresh = tuple(head), tuple(fresh)
        return fresh

    def describe(self) -> str:
        """``"<dir> (family, step N, sha256 ...); freshly initialised: classifier.classifier"``:
        the fresh modules (not their parents: an imported BERT supplies the head's pooler)."""
        modules = sorted({name.rsplit(".", 1)[0] for name in self.fresh or ()})
        note = f"; freshly initialised: {', '.join(modules)}" if modules else ""
        return f"{self.source.describe()}{note}"


def _under(name: str, prefixes: Collection[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def load_warm_start(path: str | Path, *, expected_sha256: str | None = None) -> WarmStart:
    """Read the checkpoint (or a run's latest checkpoint) at ``path`` to start from.

    Raises ``CheckpointError`` naming the file for a missing or broken
    checkpoint, an unknown family, a text model without its tokenizer, or
    weights whose sha256 is not ``expected_sha256``.
    """
    directory = resolve_checkpoint(path)
    weights = directory / MODEL_FILE
    if not weights.is_file():
        raise CheckpointError(f"{weights}: file not found; cannot start from {path}")
    digest = weights_digest(weights)
    if expected_sha256 is not None and not digest.matches(expected_sha256):
        raise CheckpointError(
            f"{weights}: sha256 {digest.content[:12]}... is not the recorded "
            f"{expected_sha256[:12]}...; "
            "the checkpoint changed since the run started from it"
        )
    ckpt = load_checkpoint(directory, load_optimizer=False)
    state = ckpt.model_state
    if read_int4_record(directory) is not None:  # GGUF blocks: start from their exact floats
        state = _float_state(directory)
    check_finite(state, weights)  # NaN weights: every step would be skipped
    try:
        family = get_family(ckpt.config.get("family", "transformer"))
        config = family.config_class.from_dict(ckpt.config)
    except ConfigError as e:
        raise CheckpointError(f"{directory / 'config.json'}: {e}") from None
    tokenizer = None
    if family.vocab_field is not None:
        if ckpt.tokenizer_json is None:
            raise CheckpointError(
                f"{directory / 'tokenizer.json'}: missing; a {family.name} model reads text "
                "with the tokenizer it was trained with"
            )
        tokenizer = tokenizer_from_json(ckpt.tokenizer_json)
    step = (ckpt.trainer_state or {}).get("step")
    source = InitSource(
        path=str(path),
        checkpoint=str(directory.resolve()),
        sha256=digest.content,
        family=family.name,
        step=None if step is None else int(step),
    )
    return WarmStart(config=config, state=state, tokenizer=tokenizer, source=source)


def _float_state(directory: Path) -> dict[str, Tensor]:
    """The state of a checkpoint stored as GGUF blocks (``import --from gguf
    --keep-quantized``) with every block linear as the float weight it holds exactly
    (``float_linears``; a tied output layer tied again)."""
    from attnkit.checkpoints.loading import load_model
    from attnkit.quantize import float_linears

    model = float_linears(load_model(directory, "cpu").model)
    return dict(model.state_dict())


def recorded_init(checkpoint: str | Path) -> dict[str, Any] | None:
    """The ``init`` record saved in a run checkpoint's trainer state (``None``: none).

    What ``--resume`` of a run that started from a checkpoint reads back.
    """
    directory = Path(checkpoint)
    if not (directory / f"{TRAINER_FILE}.json").exists():
        return None
    state = load_checkpoint(directory, load_optimizer=False).trainer_state or {}
    record = (state.get("run") or {}).get("init")
    return dict(record) if isinstance(record, Mapping) else None


def copy_weights(
    model: nn.Module, state: Mapping[str, Tensor], *, source: Path, head: Collection[str] = ()
) -> list[str]:
    """Copy ``state`` (a checkpoint's, read from ``source``) into ``model``.

    State entries under the module prefixes ``head`` (e.g. ``"classifier"``)
    may be missing from ``state``, extra in it or of another shape: the model
    keeps its fresh initialisation there. Returns the names of those freshly
    initialised entries. Every other mismatch is a ``CheckpointError``.
    """
    expected = model.state_dict()
    fresh, loaded = [], {}
    for name, tensor in expected.items():
        value = state.get(name)
        if value is not None and tuple(value.shape) == tuple(tensor.shape):
            loaded[name] = value
        elif _under(name, head):
            fresh.append(name)
            loaded[name] = tensor
        elif value is None:
            raise CheckpointError(f"{source}: has no {name}, which the model needs")
        else:
            raise CheckpointError(
                f"{source}: {name} has shape {tuple(value.shape)}, the model needs "
                f"{tuple(tensor.shape)}"
            )
    unexpected = [n for n in state if n not in expected and not _under(n, head)]
    if unexpected:
        raise CheckpointError(f"{source}: holds {unexpected[:4]}, which the model does not have")
    model.load_state_dict(loaded, strict=True)
    return fresh


def count_parameters(model: nn.Module) -> tuple[int, int]:
    """``(trainable, total)`` parameters (tied matrices once); trainable: ``requires_grad``."""
    params = list(model.parameters())  # each tied parameter once
    return sum(p.numel() for p in params if p.requires_grad), sum(p.numel() for p in params)


def warm_start_for_run(
    run_config: RunConfig,
    out: Path,
    *,
    init: str | None,
    resume: bool,
    resolve: Callable[[str], str] = str,
    pin: Callable[[str], str] | None = None,
) -> WarmStart | None:
    """The checkpoint a run starts from, or ``None``: the new-run / resume / LoRA policy.

    A new run: ``init`` (``--init``; else the config's ``init``), whose source
    is then recorded in ``run_config.init``. ``resolve`` turns a name into a local
    checkpoint (the CLI's: ``hf:ORG/NAME`` imported once from the Hub) and ``pin``
    names such a checkpoint as it is recorded (``hf:ORG/NAME@COMMIT``); the library
    never reaches the Hub itself. ``resume`` of a run that started
    from a checkpoint: the run's own latest checkpoint (its model and
    tokenizer; the weights are the resume's), with the recorded source kept;
    a LoRA run's is its base (its checkpoints hold the adapters alone). ``init``
    must then name the same weights.
    """
    if resume:
        latest = latest_checkpoint(out)
        record = recorded_init(latest) if latest is not None else None
        if record is None:
            if init is not None:
                raise UsageError(f"--init: {out} did not start from a checkpoint; --resume "
                                 "continues it as it is (drop --init)")  # fmt: skip
            run_config.init = None
            return None
        if init is not None:
            given = weights_digest(resolve_checkpoint(resolve(init)) / MODEL_FILE)
            if not given.matches(record.get("sha256")):
                where = record.get("checkpoint")
                raise UsageError(f"--init {init}: {out} started from other weights ({where}); "
                                 "drop --init to resume it")  # fmt: skip
        run_config.init = InitConfig(**record)
        assert latest is not None  # a record implies a checkpoint
        if read_adapter_info(latest) is not None:  # LoRA: adapters alone; the base's weights
            return load_warm_start(record["checkpoint"], expected_sha256=record.get("sha256"))
        return load_warm_start(latest)
    if init is not None:
        run_config.init = InitConfig(path=init)
    if run_config.init is None:
        return None
    named = run_config.init.path
    local = resolve(named)
    start = load_warm_start(local, expected_sha256=run_config.init.sha256)
    path = pin(local) if pin is not None and local != named else named
    run_config.init = InitConfig(**{**start.source.to_dict(), "path": path})
    return start
