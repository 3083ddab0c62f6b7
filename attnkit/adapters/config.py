"""``LoRAConfig``: what a low-rank adaptation adds to a model, and where.

LoRA (Hu et al., 2021, "LoRA: Low-Rank Adaptation of Large Language
Models") freezes a pretrained weight ``W`` ``(out, in)`` and learns
``ΔW = (alpha / r) B A`` with ``A`` ``(r, in)`` and ``B`` ``(out, r)``
(§4.1). ``B`` starts at zero, so the adapted model equals the base at step 0;
``alpha / r`` keeps the update's size roughly independent of ``r`` (§4.1:
"we simply set alpha to the first r we try and do not tune it").

Targets are roles, not module names, so one config fits every family:

* ``q``, ``k``, ``v``: the query, key and value projections (row slices of a
  fused ``qkv_proj``, or separate projections);
* ``o``: the attention output projection;
* ``ffn``: every matrix of the feed-forward network (``w1``/``w2``, SwiGLU's
  three, each expert's in a mixture of experts; never the router).

``attnkit.adapters.targets`` maps roles to each family's modules.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

from attnkit.validation import at_least, check_fields, from_mapping, in_range, require

Role = Literal["q", "k", "v", "o", "ffn"]
ROLES: tuple[str, ...] = ("q", "k", "v", "o", "ffn")


@dataclass
class LoRAConfig:
    """Rank, scale, dropout and target roles of the adapters (see the module doc).

    Attributes:
        rank: ``r``, the rank of ``B A`` (>= 1).
        alpha: the update is scaled by ``alpha / rank``.
        dropout: dropout on the adapter's input (the base path sees ``x`` as it is).
        targets: the roles to adapt (default the paper's choice, §7.1: ``q`` and ``v``).
    """

    rank: int = 8
    alpha: float = 16.0
    dropout: float = 0.0
    targets: tuple[Role, ...] = ("q", "v")

    def __post_init__(self) -> None:
        if isinstance(self.targets, list):
            self.targets = tuple(self.targets)
        if isinstance(self.targets, tuple):  # name the bad role (check_fields names the type)
            for role in self.targets:
                require("targets", role in ROLES,
                        f"unknown role {role!r}; expected some of {', '.join(ROLES)}")  # fmt: skip
        check_fields(self)
        at_least(self, ("rank",), 1)
        require("alpha", self.alpha > 0, f"must be > 0, got {self.alpha}")
        in_range("dropout", self.dropout, 0.0, 1.0)
        require("targets", len(self.targets) > 0, f"name at least one of {', '.join(ROLES)}")
        require(
            "targets",
            len(set(self.targets)) == len(self.targets),
            f"lists a role twice: {list(self.targets)}",
        )

    @property
    def scaling(self) -> float:
        """``alpha / rank``, the factor in front of ``B A``."""
        return self.alpha / self.rank

    def to_dict(self) -> dict[str, object]:
        data = asdict(self)
        data["targets"] = list(self.targets)
        return data

    @classmethod
    def from_dict(cls, data: object, prefix: str = "lora") -> LoRAConfig:
        """Validate a mapping (YAML, JSON); errors name ``prefix.key``."""
        return from_mapping(cls, data, prefix)
