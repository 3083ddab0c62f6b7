"""Modules declare their roles (ARCHITECTURE.md, principle 16).

An attention module, a feed-forward variant, a position module or a norm says
itself which of its linears are projections and what each one's output rows
are (``q``, ``k``, ``v``, ``o``, ``ffn_in``, ``ffn_gate``, ``ffn_out``), which
linears it owns that are not projections of the residual stream (a router,
a score's own weights), and which of its parameters are position terms,
norms or embeddings. LoRA (``attnkit.adapters``), the optimizer's groups and
freezing read these declarations through ``declared_projections`` and
``parameter_kinds``; no class table is kept elsewhere, so a new module is
covered the day it declares.

A module declares by having a ``roles()`` method returning ``Roles``
(``DeclaresRoles``). A projection is named by its path below the declaring
module (``"qkv_proj"``, or ``"score.query_proj"`` for a linear inside a
child), so a parent may speak for a child's linears: the first declaration of
a linear in ``named_modules`` order (parents before children) is the one that
counts. Self-attention with an additive score declares the score's linears as
``score`` (they read per-head queries, not the stream); an RNN's additive
score, which *is* its attention, declares them ``q`` and ``k`` itself.

A fused projection lists several roles with their row counts, in order:
``qkv_proj`` is ``q`` rows, then ``k`` rows, then ``v`` rows (grouped-query
attention has fewer key/value rows than query rows).

Torch's own ``nn.LayerNorm`` and ``nn.Embedding`` cannot declare; they count
as ``norm`` and ``embedding`` here, by their type (the one place that does).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

from torch import nn

# What a linear's output rows are. Projections of the residual stream:
# attention's query/key/value/output, a feed-forward network's input, gate and output.
ProjectionRole = Literal["q", "k", "v", "o", "ffn_in", "ffn_gate", "ffn_out"]
PROJECTION_ROLES: tuple[str, ...] = ("q", "k", "v", "o", "ffn_in", "ffn_gate", "ffn_out")
# Linears an attention or FFN module owns that are not projections of the stream:
# a mixture of experts' router, an attention score's own weights.
OTHER_LINEAR_ROLES: tuple[str, ...] = ("router", "score")
# What a parameter is, for the optimizer (no decay; a learning rate of its own),
# for freezing and for LoRA: relative-position terms (T5 buckets, Shaw's tables,
# Swin's window bias), an absolute position table, a norm's weight or bias, an
# embedding, a task head (a classifier: a LoRA run trains it in full).
ParameterKind = Literal["relative_position", "position", "norm", "embedding", "head"]


@dataclass(frozen=True)
class Projection:
    """One linear of a module and the roles of its output rows.

    Attributes:
        path: the linear's dotted path below the declaring module (``"qkv_proj"``).
        roles: the roles of its output rows, in order.
        sizes: the row count of each role (``None``: one role, every row).
    """

    path: str
    roles: tuple[str, ...]
    sizes: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.sizes is None and len(self.roles) != 1:
            raise ValueError(f"{self.path}: a fused projection needs the size of each role")
        if self.sizes is not None and len(self.sizes) != len(self.roles):
            raise ValueError(f"{self.path}: {len(self.roles)} roles, {len(self.sizes)} sizes")

    def rows(self, out_features: int) -> dict[str, tuple[int, int]]:
        """``role -> (start, stop)`` of its rows in a linear with ``out_features`` rows."""
        if self.sizes is None:
            return {self.roles[0]: (0, out_features)}
        if sum(self.sizes) != out_features:
            raise ValueError(f"{self.path}: roles cover {sum(self.sizes)} of {out_features} rows")
        rows, start = {}, 0
        for role, size in zip(self.roles, self.sizes, strict=True):
            rows[role] = (start, start + size)
            start += size
        return rows


def projection(path: str, role: str) -> Projection:
    """A linear with one role (every row)."""
    return Projection(path, (role,))


@dataclass(frozen=True)
class Roles:
    """What a module declares (see the module doc).

    Attributes:
        projections: its linears (below it) and their roles.
        parameters: parameter path below it -> kind (``"bias_table": "relative_position"``).
    """

    projections: tuple[Projection, ...] = ()
    parameters: Mapping[str, ParameterKind] = field(default_factory=dict)


@runtime_checkable
class DeclaresRoles(Protocol):
    """A module that says what its linears and parameters are."""

    def roles(self) -> Roles: ...


def declaration(module: nn.Module) -> Roles | None:
    """``module``'s own declaration; torch's norms and embeddings by type; else ``None``."""
    if isinstance(module, DeclaresRoles):
        return module.roles()
    if isinstance(module, nn.LayerNorm):
        return Roles(parameters={name: "norm" for name, _ in module.named_parameters()})
    if isinstance(module, nn.Embedding):
        return Roles(parameters={"weight": "embedding"})
    return None


@dataclass(frozen=True)
class DeclaredProjection:
    """One declared linear of a model.

    Attributes:
        name: its dotted path in the model.
        owner: the module holding it as a child (``getattr(owner, attribute)``).
        attribute: its name on ``owner``.
        rows: ``role -> (start, stop)`` of its output rows.
        declared_by: the module whose declaration named it.
    """

    name: str
    owner: nn.Module
    attribute: str
    rows: dict[str, tuple[int, int]]
    declared_by: nn.Module


def _join(prefix: str, path: str) -> str:
    return f"{prefix}.{path}" if prefix else path


def declared_projections(model: nn.Module) -> Iterator[DeclaredProjection]:
    """Every declared linear of ``model``, each once (its first declaration), in
    ``named_modules`` order of the declaring modules."""
    seen: set[int] = set()
    for prefix, module in model.named_modules():
        roles = declaration(module)
        if roles is None:
            continue
        for proj in roles.projections:
            parent, _, attribute = proj.path.rpartition(".")
            owner = module.get_submodule(parent) if parent else module
            linear = getattr(owner, attribute, None)
            weight = getattr(linear, "weight", None)
            if linear is None or id(linear) in seen or weight is None or weight.dim() != 2:
                continue
            seen.add(id(linear))
            rows = proj.rows(int(weight.size(0)))
            yield DeclaredProjection(_join(prefix, proj.path), owner, attribute, rows, module)


def parameter_kinds(model: nn.Module) -> dict[str, ParameterKind]:
    """``parameter name -> kind`` of every declared parameter of ``model``
    (``named_parameters`` names; the first declaration of a parameter counts)."""
    by_id = {id(p): name for name, p in model.named_parameters()}
    kinds: dict[str, ParameterKind] = {}
    for _, module in model.named_modules():
        roles = declaration(module)
        if roles is None:
            continue
        own = dict(module.named_parameters())
        for path, kind in roles.parameters.items():
            param = own.get(path)
            if param is not None and id(param) in by_id:
                kinds.setdefault(by_id[id(param)], kind)
    return kinds


def linears_as(path: str, module: nn.Module | None, role: str) -> tuple[Projection, ...]:
    """Every linear inside ``module`` (at ``path`` below the declarer) with one ``role``:
    how an attention module speaks for its score's own weights."""
    if module is None:
        return ()
    return tuple(
        projection(_join(path, name), role)
        for name, child in module.named_modules()
        if isinstance(child, nn.Linear) and name
    )
