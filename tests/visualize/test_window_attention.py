"""The Swin window-attention map: each window's weights, the windows, the shift undone, a PNG."""

import torch

from attnkit.models.swin import SwinConfig, SwinTransformer
from attnkit.visualize.window_attention import plot_window_attention, window_attention


def _model() -> SwinTransformer:
    torch.manual_seed(0)
    config = SwinConfig.from_preset("digits", embed_dim=8, patch_size=1, window_size=4)
    return SwinTransformer(config)


def test_each_window_receives_a_total_weight_of_one_and_the_windows_follow_the_shift():
    model = _model()
    image = torch.rand(1, 8, 8)
    assert [stage for stage, _ in model.blocks()] == [0, 0, 1, 1]
    plain = window_attention(model, image, layer=0)
    assert plain.shift == 0 and plain.stage == 0 and plain.grid.shape == (8, 8)
    # Windows of 4x4 in image order: the top-left quarter is window 0.
    assert (plain.window[:4, :4] == plain.window[0, 0]).all()
    assert plain.window[0, 0] != plain.window[0, 4] != plain.window[4, 4]
    for w in plain.window.unique():  # the mean over a window's queries sums to 1 over it
        torch.testing.assert_close(plain.grid[plain.window == w].sum(), torch.tensor(1.0))
    shifted = window_attention(model, image, layer=1, head=0)
    assert shifted.shift == 2
    # The shifted windows' borders moved by 2: tokens 2..5 of each side share a window.
    assert (shifted.window[2:6, 2:6] == shifted.window[2, 2]).all()
    assert shifted.window[1, 1] != shifted.window[2, 2]
    for w in shifted.window.unique():
        torch.testing.assert_close(shifted.grid[shifted.window == w].sum(), torch.tensor(1.0))
    assert shifted.probs.shape == (10,)


def test_the_map_is_drawn(tmp_path):
    model = _model()
    image = torch.rand(1, 8, 8)
    path = plot_window_attention(
        image, window_attention(model, image, layer=-1), tmp_path / "w.png"
    )
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 2000
