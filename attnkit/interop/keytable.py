"""Key tables: how attnkit's state-dict keys and another format's keys correspond, as data.

A ``Table`` holds ``Rule``s that pair keys of one side (``ours``: attnkit's
state dict, or the side nearer to it) with the keys another format uses
(``theirs``), the shape their tensors have in named sizes (``Dims``), and the
layout ``Step``s between the two. ``attnkit.interop.keymap`` reads a table in
both directions (imports and exports); every format's table lives beside its
reader (``hf.marian.marian_keys``, ``hf.bert``, ``hf.gpt2.GPT2_KEYS``,
``llama.LLAMA_KEYS``, ``gguf.GGUF_LLAMA_KEYS``, ``torch_nn``).

Templates name their variable parts: ``{wb}`` makes one rule for ``weight``
and one for ``bias`` (the bias has the weight's first dimension); any other
``{name}`` is a layer index (``\\d+``) whose count is ``dims[name]``, one
name per stack (``{i}``; ``{enc}``/``{dec}`` for an encoder-decoder).
Shapes are given for their side, one per key, as space-separated dimensions,
each a sum of ``INT``, ``NAME`` or ``INT*NAME`` (``"D+2*KV D"``). Where one
side has several keys for one tensor of the other (q, k, v and a fused
``qkv_proj``), the tensors are stacked along dim 0 in the order given
(``fuse`` writes such rules; ``stack_rows``/``split_rows`` do it). Checkpoint
names are translated in these tables only, never in attnkit's modules.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from attnkit.errors import CheckpointError

PLACEHOLDER = re.compile(r"\{(\w+)\}")
WB = "wb"  # the weight-and-bias placeholder


def stack_rows(parts: Sequence[Tensor]) -> Tensor:
    """Tensors stacked along dim 0 (q | k | v into a fused projection)."""
    return parts[0] if len(parts) == 1 else torch.cat(list(parts), dim=0)


def split_rows(tensor: Tensor, rows: Sequence[int]) -> list[Tensor]:
    """The inverse of ``stack_rows``: ``tensor`` cut along dim 0 into ``rows`` rows each."""
    if sum(rows) != tensor.size(0):
        raise CheckpointError(f"{tensor.size(0)} rows do not split into {list(rows)}")
    return list(torch.split(tensor, list(rows), dim=0))


@dataclass(frozen=True)
class Dims:
    """Named sizes a table's shapes and layer counts refer to, and where each came from.

    ``values``: ``{"D": 512, "i": 6, ...}``; ``fields``: the same names -> the
    field of the file's config or metadata that gave it (``"hidden_size"``),
    for messages; ``source``: that config (``"config.json"``).
    """

    values: Mapping[str, int]
    fields: Mapping[str, str] = field(default_factory=dict)
    source: str = "the config"

    def __getitem__(self, name: str) -> int:
        return self.values[name]

    def size(self, expression: str) -> int:
        """``"D+2*KV"`` -> its value (terms ``INT``, ``NAME`` or ``INT*NAME``)."""
        total = 0
        for term in expression.split("+"):
            factor, _, name = term.rpartition("*")
            value = int(name) if name.isdigit() else self.values[name]
            total += (int(factor) if factor else 1) * value
        return total

    def shape(self, spec: str) -> tuple[int, ...]:
        return tuple(self.size(d) for d in spec.split())

    def describe(self, spec: str) -> str:
        """The config fields behind ``spec`` (``"intermediate_size, hidden_size"``)."""
        names = dict.fromkeys(n for n in re.findall(r"[A-Za-z_]\w*", spec))
        return ", ".join(self.fields.get(n, n) for n in names)


@dataclass(frozen=True)
class Step:
    """A change of layout between their tensor and ours, in both directions.

    ``load`` turns their tensor into ours, ``save`` ours into theirs; both get the
    ``Dims`` (head counts for RoPE rows, ``D`` for a permutation).
    """

    name: str
    load: Callable[[Tensor, Dims], Tensor]
    save: Callable[[Tensor, Dims], Tensor]


# Conv1D (GPT-2) stores ``(in, out)``; a 1-D bias is left as it is.
TRANSPOSE = Step("transpose", lambda t, _: t.t(), lambda t, _: t.t())


@dataclass(frozen=True)
class Join:
    """How several of their tensors become one of ours when not by stacking rows."""

    name: str
    load: Callable[[Sequence[Tensor]], Tensor]


@dataclass(frozen=True)
class Rule:
    """One tensor of ours and the key(s) it has in another format (see the module doc).

    Attributes:
        ours: our key template; several: stacked along dim 0 into their one tensor.
        theirs: their key template(s); several: stacked along dim 0 into our one tensor.
        shape: their shape per ``theirs`` key (for ``{wb}``: the weight's).
        steps: layout changes applied to each of their tensors, theirs -> ours in order.
        aliases: other names their files give a single tensor (read if the first is absent).
        rows: with several ``ours``: the rows of each (default: from ``shape`` with
            several ``theirs``).
        join: with several ``theirs``: how they become ours (default: stacked rows).
    """

    ours: str | tuple[str, ...]
    theirs: str | tuple[str, ...]
    shape: str | tuple[str, ...] = ()
    steps: tuple[Step, ...] = ()
    aliases: tuple[str, ...] = ()
    rows: tuple[str, ...] = ()
    join: Join | None = None

    @property
    def our_keys(self) -> tuple[str, ...]:
        return (self.ours,) if isinstance(self.ours, str) else self.ours

    @property
    def their_keys(self) -> tuple[str, ...]:
        return (self.theirs,) if isinstance(self.theirs, str) else self.theirs

    @property
    def shapes(self) -> tuple[str, ...]:
        return (self.shape,) if isinstance(self.shape, str) else self.shape

    def expand(self) -> list[Rule]:
        """A ``{wb}`` rule as its weight rule and its bias rule; others as they are."""
        if not any(f"{{{WB}}}" in k for k in self.our_keys + self.their_keys):
            return [self]

        def fill(keys: tuple[str, ...], kind: str) -> tuple[str, ...]:
            return tuple(k.replace(f"{{{WB}}}", kind) for k in keys)

        bias_shapes = tuple(s.split()[0] for s in self.shapes)
        return [
            Rule(fill(self.our_keys, kind), fill(self.their_keys, kind), shapes, self.steps,
                 fill(self.aliases, kind), self.rows, self.join)
            for kind, shapes in (("weight", self.shapes), ("bias", bias_shapes))
        ]  # fmt: skip


def fuse(ours: str, theirs: str, parts: Sequence[str], shapes: Sequence[str], *, steps=()) -> Rule:
    """A rule stacking their keys ``theirs`` with ``*`` replaced by each of ``parts``
    (``"qkv"``: ``q_proj``, ``k_proj``, ``v_proj``) into our one key ``ours``."""
    keys = tuple(theirs.replace("*", p) for p in parts)
    return Rule(ours, keys, tuple(shapes), tuple(steps))


@dataclass(frozen=True)
class Table:
    """A format's rules, the keys of theirs to skip, an optional prefix, and tied keys.

    ``prefix``: a prefix their files may put before every key (``"bert."``);
    read if present, never written.
    ``ties``: our key -> our key it shares a tensor with; the tied key's own
    rule is dropped (their copy, if any, is skipped) and the tensor shared.
    """

    name: str
    rules: tuple[Rule, ...]
    ignore: tuple[str, ...] = ()
    prefix: str = ""
    ties: Mapping[str, str] = field(default_factory=dict)

    def without(self, ours: Collection[str]) -> Table:
        """This table less the rules of our keys ``ours``; their keys are skipped if present."""
        kept, skipped = [], list(self.ignore)
        for rule in self.rules:
            if set(rule.our_keys) & set(ours):
                skipped += rule.their_keys + rule.aliases
            else:
                kept.append(rule)
        return Table(self.name, tuple(kept), tuple(skipped), self.prefix, self.ties)

    def tie(self, ties: Mapping[str, str]) -> Table:
        """This table with ``ties`` (see the class doc)."""
        table = self.without(ties)
        return Table(self.name, table.rules, table.ignore, self.prefix, {**self.ties, **ties})

    def expanded(self) -> list[Rule]:
        return [r for rule in self.rules for r in rule.expand()]
