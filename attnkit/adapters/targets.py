"""Which linears LoRA adapts: the projections the modules declare (``attnkit.roles``).

Every attention module, feed-forward variant and norm says what its linears
are (ARCHITECTURE.md, principle 16); this module only maps the declared roles
to LoRA's target names, which are the names of ``train.lora.targets``:

* ``q``, ``k``, ``v``, ``o``: the same roles, in self-attention (a fused
  ``qkv_proj``, adapted per row block), cross-attention (``q_proj`` and
  ``kv_proj``, keys then values), window, linear and grouped-query attention,
  and an RNN's additive score (``q``/``k``) and its output layer (``o``);
* ``ffn``: every matrix of a feed-forward network (``ffn_in``, ``ffn_gate``,
  ``ffn_out``: ``w1``/``w2``, SwiGLU's three, each expert's; never the router).

Linears declared as a ``router`` or a ``score`` (an attention score's own
weights), the embeddings, the output projection, classifier heads and ViT's
patch projection are never targets. A target's adapters are named by the LoRA
target (``...w1.lora_A.ffn``, ``...qkv_proj.lora_A.q``): the names every LoRA
checkpoint holds.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from torch import nn

from attnkit.roles import declared_projections

# Declared role -> LoRA target name (``LoRAConfig.targets``); roles not here are not adapted.
LORA_TARGET: dict[str, str] = {
    "q": "q",
    "k": "k",
    "v": "v",
    "o": "o",
    "ffn_in": "ffn",
    "ffn_gate": "ffn",
    "ffn_out": "ffn",
}


@dataclass(frozen=True)
class Target:
    """One linear to adapt: ``getattr(owner, attribute)`` and its rows per LoRA target.

    ``rows``: target name -> ``(start, stop)`` of every target the linear carries
    (whether chosen or not); ``name``: its dotted path in the model.
    """

    name: str
    owner: nn.Module
    attribute: str
    rows: dict[str, tuple[int, int]]


def find_targets(model: nn.Module) -> Iterator[Target]:
    """Every declared projection of ``model`` that LoRA can adapt, in ``named_modules`` order."""
    for proj in declared_projections(model):
        rows: dict[str, tuple[int, int]] = {}
        for role, span in proj.rows.items():
            target = LORA_TARGET.get(role)
            if target is None:
                continue
            if target in rows:  # two roles of one linear map to one target: not declared today
                raise ValueError(f"{proj.name}: roles {sorted(proj.rows)} share a LoRA target")
            rows[target] = span
        if rows:
            yield Target(proj.name, proj.owner, proj.attribute, rows)


def roles_present(model: nn.Module) -> set[str]:
    """The LoRA targets ``model`` has projections for (an RNN has no ``v`` or ``ffn``)."""
    return {role for target in find_targets(model) for role in target.rows}


def selected(target: Target, roles: Iterable[str]) -> dict[str, tuple[int, int]]:
    """The rows of ``target`` whose LoRA target is in ``roles``."""
    wanted = set(roles)
    return {role: rows for role, rows in target.rows.items() if role in wanted}
