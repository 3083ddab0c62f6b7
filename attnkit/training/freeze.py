"""``train.freeze``: parameters that keep their values while the rest trains (any task, any family).

Entries of the list, combined:

* ``embeddings``: every input embedding: token tables, learned position
  tables, segment (token-type) tables, the embedding norm, a ViT's patch
  projection: what the modules declare ``embedding`` or ``position``
  (``attnkit.roles``). A tied output projection is the token table, so it is
  frozen with it.
* ``layers:N``: the first ``N`` layers of every layer stack (an encoder's,
  a decoder's, a decoder-only model's ``layers``); an encoder-decoder model
  freezes ``N`` of each.
* anything else: a pattern (``fnmatch``: ``*``, ``?``, ``[0-3]``) over
  parameter or module names, as ``model.named_parameters()`` spells them:
  ``encoder.layers.0`` (a module: all its parameters), ``*.ffn.*``,
  ``embed.tokens.weight``. A pattern that matches nothing is an error naming
  it, so a typo never trains what it meant to freeze.

Freezing sets ``requires_grad=False``: the optimizer never sees those
parameters (``build_optimizer`` takes trainable ones only), no gradient is
computed for them, and the trainable count that ``attnkit train`` prints
(``attnkit.training.warm_start.count_parameters``) leaves them out.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence

from torch import nn

from attnkit.errors import ConfigError
from attnkit.roles import parameter_kinds

EMBEDDINGS = "embeddings"
LAYERS = "layers:"


def check_freeze_entry(entry: str) -> None:
    """Validate one ``train.freeze`` entry's syntax (patterns are checked against a model)."""
    if not entry.strip():
        raise ConfigError("freeze: an entry is empty")
    if entry.startswith(LAYERS):
        count = entry[len(LAYERS) :]
        if not count.isdigit():
            raise ConfigError(f"freeze: {entry!r}: expected layers:N with N >= 0 (layers:2)")


def _embedding_names(model: nn.Module) -> set[str]:
    return {name for name, kind in parameter_kinds(model).items()
            if kind in ("embedding", "position")}  # fmt: skip


def _layer_names(model: nn.Module, count: int) -> set[str]:
    """Parameters of the first ``count`` layers of every ``layers`` module list."""
    stacks = [(p, m) for p, m in model.named_modules()
              if isinstance(m, nn.ModuleList) and p.split(".")[-1] == "layers"]  # fmt: skip
    if not stacks:
        raise ConfigError(
            f"freeze: {LAYERS}{count}: this {type(model).__name__} has no layer stacks; "
            "name its parameters with a pattern instead"
        )
    names = set()
    for prefix, layers in stacks:
        for i, layer in enumerate(layers):
            if i < count:
                names |= {f"{prefix}.{i}.{n}" for n, _ in layer.named_parameters()}
    return names


def _pattern_names(all_names: Sequence[str], pattern: str) -> set[str]:
    module = pattern + ".*"  # a module's name covers its parameters
    return {
        n for n in all_names if fnmatch.fnmatchcase(n, pattern) or fnmatch.fnmatchcase(n, module)
    }


def freeze(model: nn.Module, entries: Sequence[str]) -> list[str]:
    """Freeze what ``entries`` name (see the module doc); returns the frozen parameters' names
    (a tied parameter under each of its names).

    Raises ``ConfigError`` naming ``train.freeze`` for an entry that matches nothing.
    """
    all_names = [n for n, _ in model.named_parameters(remove_duplicate=False)]
    chosen: set[str] = set()
    for entry in entries:
        check_freeze_entry(entry)
        if entry == EMBEDDINGS:
            found = _embedding_names(model)
        elif entry.startswith(LAYERS):
            found = _layer_names(model, int(entry[len(LAYERS) :]))
        else:
            found = _pattern_names(all_names, entry)
        if not found and entry != f"{LAYERS}0":
            example = next(iter(all_names), "")
            raise ConfigError(
                f"train.freeze: {entry!r} matches no parameter (names look like {example!r}; "
                "use embeddings, layers:N or a pattern such as 'encoder.layers.0')"
            )
        chosen |= found
    named = list(model.named_parameters(remove_duplicate=False))
    frozen = {id(p) for n, p in named if n in chosen}
    for _, p in named:
        if id(p) in frozen:
            p.requires_grad_(False)
    return sorted(n for n, p in named if id(p) in frozen)  # tied aliases included
