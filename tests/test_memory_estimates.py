"""Size checks before large allocations: estimates on the meta device, against what there is."""

from __future__ import annotations

import subprocess
import sys

import pytest

from attnkit.errors import ConfigError
from attnkit.memory_estimates import MAX_LAYERS, available_bytes, model_bytes, require
from attnkit.models import TransformerConfig, build_model


def _config(**kw) -> TransformerConfig:
    fields = dict(d_model=16, num_heads=2, d_ff=32, num_encoder_layers=1, num_decoder_layers=1,
                  src_vocab_size=20, tgt_vocab_size=20, max_len=32)  # fmt: skip
    return TransformerConfig(**{**fields, **kw})


def test_the_meta_estimate_is_the_real_size():
    config = _config()
    model = build_model(config)
    real = sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()])
    assert model_bytes(config, build_model) == real


def test_a_huge_position_count_is_measured_without_allocating_it():
    need = model_bytes(_config(max_len=10**12), build_model)  # meta: no memory, no time
    assert need >= 10**12 * 16 * 4
    with pytest.raises(ConfigError, match="needs at least .* GiB of memory"):
        require(need, "model.max_len")


@pytest.mark.parametrize("positions", ["sinusoidal", "rotary", "learned", "sinusoidal+relative"])
def test_tables_built_on_the_cpu_are_measured_on_meta_too(positions):
    """Rotary tables are built with device="cpu": under a 4 GiB address-space limit, 10**12
    positions of every kind are measured without allocating them (a real allocation fails)."""
    code = (
        "import resource; resource.setrlimit(resource.RLIMIT_AS, (4 << 30, -1)); "
        "from attnkit.memory_estimates import model_bytes; from attnkit.models import build_model, "
        "TransformerConfig as C; "
        "print(model_bytes(C(d_model=16, num_heads=2, d_ff=32, num_encoder_layers=1, "
        f"num_decoder_layers=1, src_vocab_size=20, tgt_vocab_size=20, positions={positions!r}, "
        "max_len=10**12), build_model))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) >= 10**12 * 8


def test_too_many_layers_are_refused_before_building_anything():
    with pytest.raises(ConfigError, match=f"model.num_encoder_layers: must be <= {MAX_LAYERS}"):
        model_bytes(_config(num_encoder_layers=10**9), build_model, prefix="model.")


def test_the_address_space_limit_counts_as_what_is_available():
    code = (
        "import resource; from attnkit.memory_estimates import available_bytes; "
        "resource.setrlimit(resource.RLIMIT_AS, (4 << 30, resource.RLIM_INFINITY)); "
        "print(available_bytes())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert 0 < int(out.stdout) < 4 << 30
    assert available_bytes() is None or available_bytes() > 0
