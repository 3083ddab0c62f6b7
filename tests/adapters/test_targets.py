"""LoRA reaches every projection of every family: what the modules declare (attnkit.roles).

A linear that an attention or feed-forward module holds and does not declare
would be silently left out of LoRA (cross-attention was, before the modules
declared their roles); these tests build every family, with the variants
that bring other modules (cross, grouped-query, local, linear attention,
additive scores, T5 and Shaw positions, SwiGLU, mixtures of experts), and
check both directions.
"""

from __future__ import annotations

import pytest
import torch
from adapter_model_helpers import OVERRIDES
from torch import nn

from attnkit.adapters import LoRAConfig, LoRALinear, find_targets, install_lora, roles_present
from attnkit.adapters.targets import LORA_TARGET
from attnkit.attention.cross import CrossAttention
from attnkit.models import FAMILIES
from attnkit.models.registry import config_from_preset
from attnkit.roles import OTHER_LINEAR_ROLES, declared_projections

# (family, variant) -> config overrides: every family, and the variants whose modules differ.
VARIANTS: dict[tuple[str, str], dict[str, object]] = {
    **{(name, "base"): dict(overrides) for name, overrides in OVERRIDES.items()},
    ("transformer", "t5"): dict(OVERRIDES["transformer"], positions="t5_relative",
                                activation="gated_gelu", norm="rmsnorm", num_kv_heads=None),
    ("transformer", "additive"): dict(OVERRIDES["transformer"], attention_score="additive",
                                      num_kv_heads=None),
    ("decoder_only", "linear"): dict(OVERRIDES["decoder_only"], attention="linear", ffn="dense",
                                     positions="sinusoidal", num_kv_heads=None),
    ("decoder_only", "local"): dict(OVERRIDES["decoder_only"], attention="local",
                                    attention_window=4, positions="alibi", ffn="dense"),
    ("encoder_only", "shaw"): dict(OVERRIDES["encoder_only"], positions="relative"),
    ("rnn", "luong"): dict(OVERRIDES["rnn"], attention="luong_general"),
}  # fmt: skip
# The LoRA targets each family has (an RNN's attention has no value projection, no FFN).
EXPECTED_TARGETS = {name: {"q", "k", "o"} if name == "rnn" else {"q", "k", "v", "o", "ffn"}
                    for name in FAMILIES}  # fmt: skip


def build(family: str, variant: str) -> nn.Module:
    torch.manual_seed(0)
    preset = "digits" if family in ("vit", "swin") else "small"
    config = config_from_preset(family, preset, **VARIANTS[(family, variant)])
    return FAMILIES[family].model_class(config).eval()


@pytest.fixture(params=sorted(VARIANTS), ids=lambda key: "-".join(key))
def model(request) -> nn.Module:
    assert {family for family, _ in VARIANTS} == set(FAMILIES)  # a new family is covered
    return build(*request.param)


def _library_block(module: nn.Module) -> bool:
    """An attention or feed-forward module of the library (where projections live)."""
    return type(module).__module__.startswith(("attnkit.attention.", "attnkit.blocks."))


def test_every_linear_of_attention_and_ffn_modules_is_declared(model):
    declared = {id(getattr(p.owner, p.attribute)) for p in declared_projections(model)}
    undeclared = [
        f"{prefix}.{name}"
        for prefix, module in model.named_modules()
        if _library_block(module)
        for name, child in module.named_children()
        if isinstance(child, nn.Linear) and id(child) not in declared
    ]
    assert not undeclared, f"linears no module declares: {undeclared}"


def test_lora_adapts_every_declared_projection(model):
    projections = list(declared_projections(model))
    adaptable = [p for p in projections if set(p.rows) & set(LORA_TARGET)]
    assert adaptable
    for p in projections:  # a role is a projection's or one of the few others
        assert set(p.rows) <= set(LORA_TARGET) | set(OTHER_LINEAR_ROLES), (p.name, p.rows)
    targets = sorted(roles_present(model))
    adapted = install_lora(model, LoRAConfig(rank=2, targets=tuple(targets)))  # type: ignore[arg-type]
    assert sorted(adapted) == sorted(p.name for p in adaptable)
    for p in adaptable:
        lora = getattr(p.owner, p.attribute)
        assert isinstance(lora, LoRALinear), p.name
        wanted = {LORA_TARGET[role]: rows for role, rows in p.rows.items() if role in LORA_TARGET}
        assert lora.slices == wanted, p.name


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_each_family_has_its_targets(family):
    assert roles_present(build(family, "base")) == EXPECTED_TARGETS[family]


def test_cross_attention_is_adapted():
    """The bug this design fixed: LoRA never reached cross-attention (it is its own class)."""
    model = build("transformer", "base")
    cross = [(prefix, m) for prefix, m in model.named_modules() if isinstance(m, CrossAttention)]
    assert cross
    names = {t.name: t for t in find_targets(model)}
    for prefix, module in cross:
        kv = names[f"{prefix}.kv_proj"]
        keys, values = module.kv_sizes  # grouped-query: 2 key/value heads of 4
        assert kv.rows == {"k": (0, keys), "v": (keys, keys + values)}
        assert names[f"{prefix}.q_proj"].rows == {"q": (0, module.q_proj.out_features)}
        assert f"{prefix}.out_proj" in names
    install_lora(model, LoRAConfig(rank=2, targets=("q", "k", "v", "o")))
    for _, module in cross:
        assert isinstance(module.q_proj, LoRALinear) and isinstance(module.kv_proj, LoRALinear)
        assert set(module.kv_proj.slices) == {"k", "v"}
        assert isinstance(module.out_proj, LoRALinear)


def test_the_base_transformer_has_cross_attention_targets():
    """The issue's count: 48 self-attention and FFN projections, and the 18 of cross-attention."""
    with torch.device("meta"):  # the layout alone: no weights to initialise
        model = FAMILIES["transformer"].model_class(config_from_preset("transformer", "base"))
    names = [t.name for t in find_targets(model)]
    assert len(names) == 48 + 18
    assert sum(".cross_attn." in n for n in names) == 18
