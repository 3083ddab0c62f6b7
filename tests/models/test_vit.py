"""Vision Transformer: patches, permutation (in)variance, shapes, config errors."""

from __future__ import annotations

import copy

import pytest
import torch

from attnkit.errors import ConfigError
from attnkit.models.vit import (
    PatchEmbedding,
    VisionTransformer,
    ViTConfig,
    patchify,
    unpatchify,
)


def tiny(**kw) -> VisionTransformer:
    torch.manual_seed(0)
    cfg = ViTConfig(
        image_size=8,
        patch_size=2,
        channels=3,
        num_classes=5,
        d_model=16,
        num_heads=2,
        d_ff=32,
        num_layers=2,
        **kw,
    )
    model = VisionTransformer(cfg).double().eval()
    torch.nn.init.normal_(model.head.weight)  # a zero head would hide any difference
    return model


def permute_patches(images, perm, p=2):
    patches = patchify(images, p)
    return unpatchify(patches[:, perm], p, images.size(1), images.size(2))


def test_patches_round_trip_and_are_the_squares_of_the_image():
    images = torch.randn(2, 3, 8, 12)
    patches = patchify(images, 4)
    assert patches.shape == (2, 6, 48)
    assert torch.equal(unpatchify(patches, 4, 3, 8), images)
    # Patch 4 = row 1, column 1: pixels [4:8, 4:8], flattened as (row, col, channel).
    assert torch.equal(patches[:, 4], images[:, :, 4:8, 4:8].permute(0, 2, 3, 1).reshape(2, -1))


def test_patch_embedding_equals_a_strided_conv():
    emb = PatchEmbedding(4, 3, 10).double()
    conv = torch.nn.Conv2d(3, 10, kernel_size=4, stride=4).double()
    with torch.no_grad():
        conv.weight.copy_(emb.proj.weight.reshape(10, 4, 4, 3).permute(0, 3, 1, 2))
        conv.bias.copy_(emb.proj.bias)
    images = torch.randn(2, 3, 8, 8, dtype=torch.float64)
    expected = conv(images).flatten(2).transpose(1, 2)
    torch.testing.assert_close(emb(images), expected, atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_without_positions_permuting_patches_leaves_logits_unchanged(pooling):
    model = tiny(positions="none", pooling=pooling)
    images = torch.randn(3, 3, 8, 8, dtype=torch.float64)
    perm = torch.randperm(16)
    a = model(images).logits
    b = model(permute_patches(images, perm)).logits
    torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_with_positions_the_order_matters_unless_positions_move_too(pooling):
    model = tiny(positions="learned", pooling=pooling)
    images = torch.randn(3, 3, 8, 8, dtype=torch.float64)
    perm = torch.randperm(16)
    a = model(images).logits
    moved = permute_patches(images, perm)
    assert not torch.allclose(a, model(moved).logits, atol=1e-6)
    # Give each patch its old position vector back: the logits return exactly.
    same = copy.deepcopy(model)
    first = 1 if pooling == "cls" else 0
    with torch.no_grad():
        table = same.positions.weight  # (S, D): the learned position of every token
        table[first:] = model.positions.weight[first:][perm]
    torch.testing.assert_close(same(moved).logits, a, atol=1e-10, rtol=1e-10)


def test_shapes_and_attention_maps():
    for pooling, seq in (("cls", 17), ("mean", 16)):
        model = tiny(pooling=pooling)
        out = model(torch.randn(4, 3, 8, 8, dtype=torch.float64), need_weights=True)
        assert out.logits.shape == (4, 5) and out.hidden.shape == (4, seq, 16)
        assert len(out.attentions) == 2 and out.attentions[0].shape == (4, 2, seq, seq)
        assert model(torch.randn(1, 3, 8, 8, dtype=torch.float64)).attentions is None
    with pytest.raises(ValueError, match="images"):
        model(torch.randn(1, 1, 8, 8, dtype=torch.float64))


def test_learns_gradients_and_config_round_trip():
    model = tiny(dropout=0.1).train()
    out = model(torch.randn(2, 3, 8, 8, dtype=torch.float64))
    torch.nn.functional.cross_entropy(out.logits, torch.tensor([0, 3])).backward()
    assert all(p.grad is not None for p in model.parameters())
    cfg = model.config
    assert ViTConfig.from_json(cfg.to_json()) == cfg
    assert ViTConfig.from_preset("vit_base_16").num_patches == 196


@pytest.mark.parametrize(
    "field,value",
    [
        ("image_size", 0),
        ("patch_size", 3),  # does not divide 8
        ("channels", 0),
        ("num_classes", 0),
        ("d_model", 30),  # not divisible by num_heads=4
        ("num_heads", 0),
        ("d_ff", 0),
        ("num_layers", 0),
        ("dropout", 1.0),
        ("pooling", "max"),
        ("positions", "bogus"),
        ("activation", "tanh"),
        ("norm_position", "middle"),
        ("d_model", 64.0),
        ("num_layers", True),
        ("max_len", 4),  # fewer than the patches
    ],
)
def test_bad_config_values_name_the_field(field, value):
    with pytest.raises(ConfigError, match=f"^{field}:"):
        ViTConfig(**{field: value})
