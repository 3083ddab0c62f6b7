"""A LoRA rank is checked against the adapted projections before anything is allocated."""

from __future__ import annotations

import json
import resource
import time

import pytest
from adapter_model_helpers import ALL_ROLES, make_model
from lora_helpers import lora_run, tiny_lm

from attnkit.adapters import LoRAConfig, LoRALinear, install_lora
from attnkit.adapters.sizes import adapter_bytes, check_rank, check_rank_for_config, max_rank
from attnkit.checkpoints import load_model
from attnkit.checkpoints.adapters import ADAPTER_FILE
from attnkit.errors import CheckpointError, ConfigError


def test_the_largest_rank_is_the_smallest_min_in_out_of_the_targets():
    model = tiny_lm()  # d_model 32, 2 key/value heads of 8: k and v have 16 rows
    assert max_rank(model, LoRAConfig(targets=("q",))) == (32, "layers.0.self_attn.qkv_proj (q)")
    assert max_rank(model, LoRAConfig(targets=("q", "v")))[0] == 16
    check_rank(model, LoRAConfig(rank=16, targets=("q", "v")))  # the limit itself is fine


@pytest.mark.parametrize("rank", [17, 3_000_000, 2**62])
def test_a_rank_past_the_targets_is_refused_in_one_line_naming_the_field(rank):
    model = tiny_lm()
    with pytest.raises(ConfigError) as error:
        install_lora(model, LoRAConfig(rank=rank, targets=("q", "v")), field="train.lora")
    assert str(error.value) == (
        f"train.lora.rank: {rank} is more than layers.0.self_attn.qkv_proj (v) allows "
        "(min(in, out) = 16); a rank above that adds no capacity, only memory; use at most 16"
    )
    # Refused before anything changed: no adapter, nothing frozen.
    assert not any(isinstance(m, LoRALinear) for m in model.modules())
    assert all(p.requires_grad for p in model.parameters())


def test_every_family_accepts_its_own_largest_rank(family):
    model = make_model(family)
    config = LoRAConfig(targets=ALL_ROLES[family])
    limit, _ = max_rank(model, config)
    config.rank = limit
    install_lora(model, config)
    assert adapter_bytes(make_model(family), config) == 4 * sum(
        p.numel() for n, p in model.named_parameters() if ".lora_" in n
    )


def test_the_config_check_builds_no_weights():
    """``check_rank_for_config`` uses the meta device: a 10**9-row model costs nothing."""
    config = tiny_lm().config
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    with pytest.raises(ConfigError, match=r"train.lora.rank: 2305843009213693952 is more"):
        check_rank_for_config(config, LoRAConfig(rank=2**61), field="train.lora")
    assert time.perf_counter() - started < 5
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100_000  # KiB


def test_a_crafted_adapter_rank_in_a_checkpoint_names_its_file(tmp_path):
    _, out, _ = lora_run(tmp_path)
    info = json.loads((out / ADAPTER_FILE).read_text())
    info["lora"]["rank"] = 3_000_000
    (out / ADAPTER_FILE).write_text(json.dumps(info))
    with pytest.raises(CheckpointError) as error:
        load_model(out, "cpu")
    assert str(error.value).startswith(f"{out / ADAPTER_FILE}: lora.rank: 3000000 is more than")
