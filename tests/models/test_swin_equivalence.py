"""Issue 27's faster Swin computes what the old one did (``swin_reference``), in float64.

Values, attention weights and gradients, for shifted and unshifted windows, square and
non-square grids, a window covering the whole grid, and whole models of every preset
shape. (There is no padding path to cover: a window must divide its grid, checked by
``SwinConfig`` and ``WindowAttention``.)
"""

import pytest
import swin_reference as ref
import torch

from attnkit.attention import windows
from attnkit.attention.windows import WindowAttention
from attnkit.models.swin import SwinConfig, SwinTransformer

TOL = {"rtol": 1e-6, "atol": 1e-6}


@pytest.mark.parametrize(
    "grid,window,shift",
    [((8, 8), 4, 0), ((8, 8), 4, 2), ((6, 9), 3, 1), ((6, 9), 3, 0), ((12, 12), 6, 3),
     ((4, 4), 2, 1), ((5, 5), 5, 0)],
)  # fmt: skip
@pytest.mark.parametrize("path", ["chosen", "windowed", "dense"])
def test_window_attention_equals_the_old_one_with_its_weights_and_gradients(
    grid, window, shift, path, monkeypatch
):
    if path != "chosen":  # both paths on every shape, whatever use_dense would pick
        monkeypatch.setattr(windows, "use_dense", lambda tokens, n: path == "dense")
    torch.manual_seed(0)
    module = WindowAttention(16, num_heads=2, window=window).double()
    torch.nn.init.normal_(module.bias_table, std=1.0)  # a bias large enough to matter
    x = torch.randn(3, *grid, 16, dtype=torch.float64, requires_grad=True)
    new, new_weights = module(x, shift, need_weights=True)
    old, old_weights = ref.window_attention(module, x, shift, need_weights=True)
    torch.testing.assert_close(new, old, **TOL)
    assert new_weights is not None and old_weights is not None
    torch.testing.assert_close(new_weights, old_weights, **TOL)
    # The fast path (no weights) and its backward, against the old fused one.
    fast, none = module(x, shift)
    assert none is None
    torch.testing.assert_close(fast, old, **TOL)
    upstream = torch.randn_like(old)
    params = [x, *module.parameters()]
    new_grads = torch.autograd.grad((fast * upstream).sum(), params)
    old_grads = torch.autograd.grad(
        (ref.window_attention(module, x, shift)[0] * upstream).sum(), params
    )
    for got, want in zip(new_grads, old_grads):
        torch.testing.assert_close(got, want, **TOL)


CONFIGS = {
    "digits": {"preset": "digits"},  # 4x4 grid in windows of 2, then a 2x2 stage
    "lfw": {"preset": "lfw"},  # 12x12 in windows of 6, then 6x6 and 3x3
    "tiny": {"preset": "digits", "embed_dim": 8, "patch_size": 1, "window_size": 4},
    "no_patch_norm": {"preset": "digits", "patch_norm": False, "depths": (3, 1),
                      "num_heads": (2, 2)},  # odd depth: a stage ends on an unshifted block
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_the_swin_model_equals_the_old_forward_and_backward(name):
    fields = dict(CONFIGS[name])
    config = SwinConfig.from_preset(fields.pop("preset"), dropout=0.0, **fields)
    torch.manual_seed(0)
    model = SwinTransformer(config).double()
    torch.nn.init.normal_(model.head.weight)  # the zero head would hide the stack's gradients
    for block in (b for _, b in model.blocks()):
        torch.nn.init.normal_(block.attn.bias_table, std=1.0)
    images = torch.rand(
        4, config.channels, config.image_size, config.image_size, dtype=torch.float64
    )
    model.eval()
    new = model(images, need_weights=True)
    old = ref.swin_forward(model, images, need_weights=True)
    torch.testing.assert_close(new.logits, old.logits, **TOL)
    torch.testing.assert_close(new.hidden, old.hidden, **TOL)
    assert new.attentions is not None and old.attentions is not None
    for got, want in zip(new.attentions, old.attentions, strict=True):
        torch.testing.assert_close(got, want, **TOL)
    model.train()  # dropout 0: training mode differs only in the fast paths taken
    params = list(model.parameters())
    new_grads = torch.autograd.grad(model(images).logits.logsumexp(-1).sum(), params)
    old_grads = torch.autograd.grad(
        ref.swin_forward(model, images).logits.logsumexp(-1).sum(), params
    )
    for got, want in zip(new_grads, old_grads, strict=True):
        torch.testing.assert_close(got, want, **TOL)


def test_the_cached_layouts_follow_the_dtype_and_the_grid():
    torch.manual_seed(0)
    module = WindowAttention(8, num_heads=2, window=2)
    x = torch.randn(2, 4, 6, 8)
    module(x, 1)
    module.double()
    for grid in ((4, 6), (6, 4), (4, 4)):  # one module, several grids (the generic API)
        x = torch.randn(2, *grid, 8, dtype=torch.float64)
        for shift in (0, 1):
            torch.testing.assert_close(
                module(x, shift)[0], ref.window_attention(module, x, shift)[0]
            )
    assert {key[-1] for key in module._layouts} == {torch.float32, torch.float64}
