"""The one match loop of every import and export: a key table read in both directions.

* ``plan_load(table, their_shapes, dims, where)`` places every tensor of a
  file, checks layer counts, completeness and every shape against ``dims``
  (sizes read from the file's config or metadata) **before any tensor is
  read or anything is allocated**, and returns a ``LoadPlan``;
  ``plan.load(fetch)`` then converts tensor by tensor, refusing NaN or
  infinite values with the tensor's name;
* ``save_state(table, state, dims)`` runs the same rules backwards (exports).

The tables themselves are data (``attnkit.interop.keytable``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from attnkit.errors import CheckpointError
from attnkit.interop.keytable import (
    PLACEHOLDER,
    WB,
    Dims,
    Rule,
    Table,
    split_rows,
    stack_rows,
)


def _pattern(template: str) -> re.Pattern[str]:
    out, pos = [], 0
    for m in PLACEHOLDER.finditer(template):
        out.append(re.escape(template[pos : m.start()]))
        name = m.group(1)  # {wb} is left only in ignore entries (rules are expanded)
        out.append("(?:weight|bias)" if name == WB else f"(?P<{name}>0|[1-9][0-9]*)")
        pos = m.end()
    return re.compile("".join(out) + re.escape(template[pos:]))


class _Slot(NamedTuple):
    """Where a key was placed: the rule, the part of its side, the index values."""

    rule: int
    part: int
    at: tuple[tuple[str, str], ...]


class _Side:
    """The compiled templates of one side of a table: the one match loop."""

    def __init__(self, rules: Sequence[Rule], ours: bool, ignore: Sequence[str]) -> None:
        self.templates: list[tuple[re.Pattern[str], int, int]] = []
        for r, rule in enumerate(rules):
            for part, template in enumerate(rule.our_keys if ours else rule.their_keys):
                self.templates.append((_pattern(template), r, part))
            if not ours:  # an alias stands for the rule's single key: part -1
                self.templates += [(_pattern(a), r, -1) for a in rule.aliases]
        self.ignore = [_pattern(t) for t in ignore]

    def place(self, key: str) -> _Slot | None:
        """Where ``key`` goes; None if it is to be skipped; ``KeyError`` if nowhere."""
        for pattern, rule, part in self.templates:
            m = pattern.fullmatch(key)
            if m:
                return _Slot(rule, part, tuple(sorted(m.groupdict().items())))
        if any(p.fullmatch(key) for p in self.ignore):
            return None
        raise KeyError(key)


def _fill(template: str, index: Mapping[str, str]) -> str:
    return PLACEHOLDER.sub(lambda m: index[m.group(1)], template)


@dataclass
class LoadPlan:
    """Every tensor of a file placed and checked (``plan_load``); ``load`` converts them."""

    table: Table
    rules: list[Rule]
    dims: Dims
    where: str
    groups: dict[tuple[int, tuple], list[str]]  # (rule, index) -> their keys, by part

    def load(
        self, fetch: Callable[[str], Tensor], *, finite: bool = True
    ) -> tuple[dict[str, Tensor], dict[str, str]]:
        """Our state dict and, per our key, the key of theirs it came from.

        ``fetch(their_key)`` reads one tensor (called once per key, so a
        caller may free what it returned). ``finite``: refuse NaN or infinite
        values, naming the tensor.
        """
        state: dict[str, Tensor] = {}
        origin: dict[str, str] = {}
        for (r, index), keys in self.groups.items():
            rule, named = self.rules[r], dict(index)
            parts = []
            for key in keys:
                tensor = fetch(key)
                if finite and tensor.is_floating_point() and not torch.isfinite(tensor).all():
                    bad = int((~torch.isfinite(tensor)).sum())
                    raise CheckpointError(
                        f"{self.where}: tensor {key}: {bad} of {tensor.numel()} values are NaN "
                        "or infinite; the file holds a broken model"
                    )
                for step in rule.steps:
                    tensor = step.load(tensor, self.dims)
                parts.append(tensor)
            ours = rule.join.load(parts) if rule.join else stack_rows(parts)
            our_keys = [_fill(k, named) for k in rule.our_keys]
            pieces = [ours] if len(our_keys) == 1 else split_rows(ours, self._rows(rule))
            for k, piece in zip(our_keys, pieces):
                state[k] = piece
                origin[k] = keys[0]
        for key, source in self.table.ties.items():
            state[key] = state[source]
            origin[key] = origin.get(source, source)
        return state, origin

    def sources(self) -> dict[str, list[str]]:
        """Our key -> the keys of theirs it is made from (nothing is read)."""
        out = {}
        for (r, index), keys in self.groups.items():
            for k in self.rules[r].our_keys:
                out[_fill(k, dict(index))] = keys
        return out

    def _rows(self, rule: Rule) -> list[int]:
        return [self.dims.size(r) for r in rule.rows]


def _strip(key: str, prefix: str) -> str:
    return key[len(prefix) :] if prefix and key.startswith(prefix) else key


def plan_load(
    table: Table, shapes: Mapping[str, tuple[int, ...]], dims: Dims, where: str
) -> LoadPlan:
    """Place and check every tensor of a file before any is read (see the module doc).

    ``shapes``: their key -> shape, as the file's header states it. ``where``:
    the file, for messages. Raises ``CheckpointError`` naming the file and the
    tensor or config field: a tensor with no place, a layer count that is not
    the file's, a missing tensor, a shape the sizes do not imply.
    """
    rules = table.expanded()
    side = _Side(rules, ours=False, ignore=table.ignore)
    file_key = {_strip(k, table.prefix): k for k in shapes}
    prefix = table.prefix if any(k != f for f, k in file_key.items()) else ""
    placed: dict[tuple[int, tuple], dict[int, str]] = {}
    aliases: dict[tuple[int, tuple], str] = {}
    for key, original in file_key.items():
        try:
            found = side.place(key)
        except KeyError:
            raise CheckpointError(
                f"{where}: tensor {original}: has no place in {table.name}"
            ) from None
        if found is None:
            continue
        group = (found.rule, found.at)
        if found.part < 0:
            aliases.setdefault(group, original)
        else:
            placed.setdefault(group, {})[found.part] = original
    for group, key in aliases.items():  # an alias stands in only for a missing key
        placed.setdefault(group, {0: key})
    _check_counts(placed, rules, dims, where)
    groups: dict[tuple[int, tuple], list[str]] = {}
    for r, rule in enumerate(rules):
        for index in _indices(rule, dims):
            got = placed.get((r, index), {})
            keys = []
            for part, template in enumerate(rule.their_keys):
                if part not in got:
                    name = prefix + _fill(template, dict(index))
                    raise CheckpointError(
                        f"{where}: tensor {name}: missing; the file does not hold the model "
                        f"{dims.source} describes"
                    )
                key = got[part]
                want = dims.shape(rule.shapes[part])
                if tuple(shapes[key]) != want:
                    raise CheckpointError(
                        f"{where}: tensor {key}: shape {tuple(shapes[key])}, expected {want} "
                        f"from {dims.source} ({dims.describe(rule.shapes[part])}); the tensors "
                        f"and {dims.source} come from different models"
                    )
                keys.append(key)
            groups[(r, index)] = keys
    return LoadPlan(table, rules, dims, where, groups)


def _index_names(rule: Rule) -> list[str]:
    return sorted({n for t in rule.their_keys for n in PLACEHOLDER.findall(t)})


def _indices(rule: Rule, dims: Dims) -> list[tuple]:
    """Every index tuple of ``rule`` (its layer counts are checked before this runs)."""
    combos: list[tuple] = [()]
    for name in _index_names(rule):
        combos = [(*c, (name, str(i))) for c in combos for i in range(dims[name])]
    return [tuple(sorted(c)) for c in combos]


def _check_counts(
    placed: Mapping[tuple[int, tuple], object], rules: Sequence[Rule], dims: Dims, where: str
) -> None:
    """Each index name's values in the file are exactly ``0 .. dims[name] - 1``."""
    found: dict[str, set[int]] = {n: set() for rule in rules for n in _index_names(rule)}
    for _, index in placed:
        for name, value in index:
            found[name].add(int(value))
    for name, values in found.items():
        want = dims[name]
        if len(values) != want or (values and max(values) != want - 1):
            holds = f"{len(values)} (indices {min(values)}..{max(values)})" if values else "none"
            raise CheckpointError(
                f"{where}: {dims.fields.get(name, name)} is {want} in {dims.source}, but the "
                f"file holds the tensors of {holds}; the file and {dims.source} disagree"
            )


def save_state(
    table: Table,
    state: Mapping[str, Tensor],
    dims: Dims,
    *,
    expected: Collection[str] | None = None,
) -> dict[str, Tensor]:
    """Our ``state`` under their keys: the same rules backwards (exports).

    ``expected``: their keys the target holds; aliases are written only where
    it lists them. Raises ``CheckpointError`` naming a key with no rule.
    """
    rules = table.expanded()
    side = _Side(rules, ours=True, ignore=table.ignore)
    groups: dict[tuple[int, tuple], dict[int, Tensor]] = {}
    unmatched = []
    for key, value in state.items():
        try:
            found = side.place(key)
        except KeyError:
            unmatched.append(key)
            continue
        if found is not None:
            groups.setdefault((found.rule, found.at), {})[found.part] = value
    if unmatched:
        raise CheckpointError(f"keys with no mapping: {', '.join(unmatched[:8])}")
    out: dict[str, Tensor] = {}
    for (r, index), parts in groups.items():
        rule, named = rules[r], dict(index)
        if len(parts) != len(rule.our_keys):
            missing = [_fill(k, named) for p, k in enumerate(rule.our_keys) if p not in parts]
            raise CheckpointError(f"keys missing for {table.name}: {', '.join(missing)}")
        if rule.join is not None:  # e.g. BERT's token-type fold: nothing to split back
            raise CheckpointError(f"{rule.our_keys[0]}: {rule.join.name} cannot be written back")
        tensor = stack_rows([parts[p] for p in range(len(parts))])
        keys = [_fill(k, named) for k in rule.their_keys]
        rows = [dims.shape(s)[0] for s in rule.shapes] if len(keys) > 1 else [tensor.size(0)]
        for key, piece in zip(keys, split_rows(tensor, rows)):
            for step in reversed(rule.steps):
                piece = step.save(piece, dims)
            out[key] = piece
        if len(keys) == 1:
            for alias in rule.aliases:
                name = _fill(alias, named)
                if expected is not None and name in expected:
                    out[name] = out[keys[0]]
    return out


def check_keys(expected: Iterable[str], got: Iterable[str], where: str = "state dict") -> None:
    """Raise naming missing and unexpected keys, if any."""
    want, have = set(expected), set(got)
    missing, unexpected = sorted(want - have), sorted(have - want)
    if missing or unexpected:
        raise CheckpointError(
            f"{where} mismatch: missing {missing[:8]}, unexpected {unexpected[:8]}"
        )
