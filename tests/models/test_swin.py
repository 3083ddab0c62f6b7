"""The Swin Transformer: stages, shifts, patch merging, config checks, training, checkpoints."""

import pytest
import torch

from attnkit.errors import ConfigError
from attnkit.models import build_model, config_from_dict
from attnkit.models.swin import PatchMerging, SwinConfig, SwinTransformer


def _tiny(**overrides) -> SwinConfig:
    # One-pixel patches: an 8x8 grid in 4 windows of 4x4, then a 4x4 stage.
    fields = {"embed_dim": 8, "patch_size": 1, "window_size": 4, **overrides}
    return SwinConfig.from_preset("digits", **fields)


def test_stages_halve_the_grid_double_the_channels_and_shift_every_other_block():
    model = SwinTransformer(_tiny())
    out = model(torch.rand(3, 1, 8, 8), need_weights=True)
    assert out.logits.shape == (3, 10)
    assert out.hidden.shape == (3, 4, 4, 16)  # stage 2: 4x4 grid, 2 x 8 channels
    shifts = [[block.shift for block in stage] for stage in model.stages]
    assert shifts == [[0, 2], [0, 0]]  # stage 2's grid fits one window: no shift
    assert out.attentions is not None and len(out.attentions) == 4
    assert out.attentions[0].shape == (3, 4, 2, 16, 16)  # 4 windows of 4x4, 2 heads
    assert out.attentions[2].shape == (3, 1, 4, 16, 16)  # one window = the whole 4x4 grid
    assert model(torch.rand(3, 1, 8, 8)).attentions is None


def test_patch_merging_concatenates_each_2x2_group_in_the_papers_order():
    merge = PatchMerging(1)
    with torch.no_grad():
        merge.norm.weight.fill_(1.0)
        merge.norm.bias.zero_()
        merge.reduction.weight.copy_(torch.tensor([[1.0, 0, 0, 0], [0, 0, 1.0, 0]]))
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0]]).view(1, 2, 2, 1)
    # (even row, even col)=1, (odd, even)=3, (even, odd)=2, (odd, odd)=4, normalised.
    normed = torch.nn.functional.layer_norm(torch.tensor([1.0, 3.0, 2.0, 4.0]), (4,))
    torch.testing.assert_close(merge(x).flatten(), normed[[0, 2]])


def test_every_token_reaches_every_other_by_the_last_stage():
    """The point of shifted windows plus merging: the output depends on every pixel."""
    torch.manual_seed(0)
    model = SwinTransformer(_tiny()).double()
    torch.nn.init.normal_(model.head.weight)
    image = torch.rand(1, 1, 8, 8, dtype=torch.float64, requires_grad=True)
    model(image).logits[0, 0].backward()
    assert image.grad is not None and (image.grad != 0).all()


@pytest.mark.parametrize(
    "overrides,field",
    [
        ({"window_size": 3}, "window_size"),  # 3 does not divide the 8x8 grid
        ({"depths": (2, 2, 2, 2, 2), "num_heads": (1, 1, 1, 1, 1)}, "depths"),  # 1x1 grid: no merge
        ({"num_heads": (2,)}, "num_heads"),  # one entry for two stages
        ({"num_heads": (3, 4)}, "num_heads"),  # 3 heads do not divide 8 channels
        ({"patch_size": 3}, "patch_size"),
        ({"mlp_ratio": 0.0}, "mlp_ratio"),
    ],
)
def test_bad_configs_name_their_field(overrides, field):
    with pytest.raises(ConfigError, match=f"^{field}: "):
        _tiny(**overrides)


def test_the_registry_builds_swin_and_the_config_round_trips_through_json():
    config = _tiny(class_names=tuple("abcdefghij"))
    assert type(build_model(config)) is SwinTransformer
    again = config_from_dict(config.to_dict())
    assert again == config and isinstance(again.depths, tuple)


def test_swin_trains_on_digits_through_the_image_task_and_its_checkpoint_loads(tmp_path):
    from attnkit.checkpoints import load_model
    from attnkit.training.loop import Trainer
    from attnkit.training.runconfig import RunConfig
    from attnkit.training.tasks import task_from_run

    run = RunConfig.from_dict(
        {
            "task": "image_classification",
            "data": {"images": "digits"},
            "model": {"family": "swin", "preset": "digits", "embed_dim": 16},
            "train": {"max_steps": 30, "max_tokens": 64 * 64, "schedule": "constant",
                      "lr": 3e-3, "warmup_steps": 0, "log_every": 10, "eval_every": 30,
                      "save_every": 30, "threads": 1},
        }
    )  # fmt: skip
    trainer = Trainer(run, task_from_run(run), tmp_path, progress=False)
    summary = trainer.fit()
    assert summary["valid"]["accuracy"] > 0.5  # ten classes: chance is 0.1
    loaded = load_model(tmp_path)
    assert loaded.family.name == "swin"
    images = torch.rand(2, 1, 8, 8)
    loaded.model.eval()
    trainer.model.eval()
    torch.testing.assert_close(loaded.model(images).logits, trainer.model(images).logits)


def test_a_black_image_does_not_blow_up_the_gradients():
    """A zero token into LayerNorm multiplies the gradient by 1/sqrt(eps) per norm; the
    patch projection's bias keeps a black patch from being a zero token (the regression:
    gradients of 1e33 on lfw_subset's almost black image)."""
    torch.manual_seed(0)
    model = SwinTransformer(SwinConfig.from_preset("lfw"))
    torch.nn.init.normal_(model.head.weight)  # the zero head would hide the stack's gradients
    images = torch.zeros(2, 1, 24, 24)
    model(images).logits.logsumexp(-1).sum().backward()
    norm = torch.nn.utils.get_total_norm([p.grad for p in model.parameters() if p.grad is not None])
    assert torch.isfinite(norm) and norm < 1e3
