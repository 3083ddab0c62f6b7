"""Data parallelism under ``torchrun`` on the CPU (gloo): 2 ranks train exactly as 1 does.

Each distributed run is the real launcher: ``python -m torch.distributed.run
--standalone --nproc_per_node=2`` running ``attnkit train`` (through a small
wrapper, below). Every rank takes a disjoint share of each global batch and
the gradients are divided by the global token count, so after several steps
(3, a checkpoint, then ``--resume`` to 6) the weights match a single process
trained on the same global batches (``max_tokens`` x 2). Gradient clipping is
on (``clip_norm`` 1.5 clips the first and third updates) and sees the global norm.

The runs use float64 (the wrapper sets the default dtype). In float32 the
comparison cannot hold at 1e-6 for any implementation: the key-projection
biases have an exact gradient of zero (softmax ignores a per-query
constant), so what they receive is rounding noise, which Adam (eps 1e-9)
scales up to steps of about the learning rate, and two summation orders
(one batch vs two halves) give different noise. In float64 that noise is
~1e-16, so the comparison tests the sharding and the loss normalisation.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from attnkit import checkpoints as ckpt
from attnkit.checkpoints import load_model
from attnkit.cli.main import main
from attnkit.data.synthetic import number_splits
from attnkit.errors import ConfigError
from attnkit.training.distributed import DistContext
from attnkit.training.runconfig import RunConfig

pytestmark = pytest.mark.skipif(
    not torch.distributed.is_available() or sys.platform == "win32",
    reason="needs torch.distributed with gloo",
)

CONFIG = """
data: {{dir: {dir}, src_lang: en, tgt_lang: de, max_len: 96}}
tokenizer: {{kind: char}}
model: {{preset: small, d_model: 32, num_heads: 2, d_ff: 64, dropout: 0.0,
        num_encoder_layers: 1, num_decoder_layers: 1, max_len: 128}}
train: {{max_steps: 6, max_tokens: 400, warmup_steps: 2, log_every: 1, eval_every: 3,
        save_every: 3, valid_bleu_sentences: 4, seed: 3, clip_norm: 1.5}}
"""

# Runs `attnkit ARGS...` in float64 and records every write this process makes
# under OUT (audit hooks see open-for-write, mkdir, rename, remove), per rank.
WRAPPER = r"""
import json, os, sys
import torch

out, report, args = os.path.realpath(sys.argv[1]), sys.argv[2], sys.argv[3:]
writes = []
WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC

def hook(event, a):
    if event == "open":
        path, mode, flags = a
        writing = (mode is not None and any(c in mode for c in "wax+")) or (
            mode is None and isinstance(flags, int) and flags & WRITE)
        paths = [path] if writing else []
    elif event in ("os.mkdir", "os.remove", "os.rmdir", "os.unlink", "shutil.rmtree"):
        paths = [a[0]]
    elif event in ("os.rename", "os.replace"):
        paths = [a[0], a[1]]
    else:
        return
    for p in paths:
        if isinstance(p, (str, bytes, os.PathLike)):
            real = os.path.realpath(os.fsdecode(p))
            if real == out or real.startswith(out + os.sep):
                writes.append(f"{event} {os.fsdecode(p)}")

sys.addaudithook(hook)
torch.set_default_dtype(torch.float64)
from attnkit.cli.main import main
code = main(args)
with open(f"{report}.rank{os.environ.get('RANK', '0')}.json", "w") as f:
    json.dump(writes, f)
sys.exit(code)
"""


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("ddp")
    for split, pairs in number_splits(60, 8, 0, low=1, high=999, seed=0).items():
        (root / f"{split}.en").write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
        (root / f"{split}.de").write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")
    config = root / "tiny.yaml"
    config.write_text(CONFIG.format(dir=root), encoding="utf-8")
    wrapper = root / "wrapper.py"
    wrapper.write_text(WRAPPER, encoding="utf-8")
    return root, config, wrapper


@pytest.fixture(scope="module")
def single(setup):
    """One process, float64, global batches of 800 tokens: the reference."""
    root, config, _ = setup
    out = root / "single"
    dtype = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        args = ["train", "--config", str(config), "--out", str(out), "--no-progress",
                "--set", "train.max_tokens=800"]  # fmt: skip
        assert main(args) == 0
    finally:
        torch.set_default_dtype(dtype)
    return out


def _torchrun(setup, out: Path, report: str, *extra: str) -> None:
    root, config, wrapper = setup
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    train = ["train", "--config", str(config), "--out", str(out), "--no-progress", *extra]
    command = [*launcher, str(wrapper), str(out), str(root / report), *train]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def _writes(root: Path, report: str, rank: int) -> list[str]:
    return json.loads((root / f"{report}.rank{rank}.json").read_text())


def _train_log(out: Path) -> list[dict]:
    records = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    return [r for r in records if r["split"] == "train"]


def _assert_matches(out: Path, single: Path, step: int) -> None:
    want = ckpt.load_checkpoint(ckpt.checkpoint_dir(single, step))
    got = ckpt.load_checkpoint(ckpt.checkpoint_dir(out, step))
    assert want.model_state.keys() == got.model_state.keys()
    for key, value in want.model_state.items():
        assert value.dtype == torch.float64
        torch.testing.assert_close(got.model_state[key], value, rtol=0, atol=1e-6, msg=key)
    # Adam's moments too, in the single-process format (indices, betas a tuple).
    assert got.optimizer_state["param_groups"] == want.optimizer_state["param_groups"]
    for idx, state in want.optimizer_state["state"].items():
        for name, value in state.items():
            torch.testing.assert_close(
                got.optimizer_state["state"][idx][name], value, rtol=0, atol=1e-6
            )
    # Same global losses and gradient norms (a wrong normalisation changes the norm),
    # from the same number of target tokens (overlapping shares would count some twice).
    for a, b in zip(_train_log(single), _train_log(out), strict=True):
        assert a["step"] == b["step"] and a["tokens"] == b["tokens"]
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-6)
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-9)


def test_ddp_two_ranks_match_one_process_and_only_rank_0_writes(setup, single):
    root, _, _ = setup
    out = root / "ddp"
    _torchrun(setup, out, "ddp_a", "--set", "train.max_steps=3")
    _torchrun(setup, out, "ddp_b", "--resume")  # both ranks load step 3, train to 6

    _assert_matches(out, single, 3)
    _assert_matches(out, single, 6)
    for report in ("ddp_a", "ddp_b"):
        assert _writes(root, report, 1) == []  # rank 1 never touched the run directory
        written = " ".join(_writes(root, report, 0))
        assert "metrics.jsonl" in written and "run.json" in written and "os.rename" in written
    steps = [r["step"] for r in _train_log(out)]
    assert steps == [1, 2, 3, 4, 5, 6]  # each record once: one writer


def test_fsdp_two_ranks_match_one_process_in_the_single_process_format(setup, single):
    root, _, _ = setup
    out = root / "fsdp"
    _torchrun(setup, out, "fsdp_a", "--set", "train.max_steps=3", "--set",
              "train.distributed=fsdp")  # fmt: skip
    _torchrun(setup, out, "fsdp_b", "--resume", "--set", "train.distributed=fsdp")

    _assert_matches(out, single, 3)
    _assert_matches(out, single, 6)
    assert _writes(root, "fsdp_a", 1) == [] and _writes(root, "fsdp_b", 1) == []
    # A gathered checkpoint loads into a plain, unsharded model.
    model = load_model(out).model
    assert sum(p.numel() for p in model.parameters()) == model.num_parameters()


LM_CONFIG = """
task: {task}
data: {{dir: {dir}, text: tiny.txt}}
tokenizer: {{kind: char}}
model: {{preset: small, d_model: 32, num_heads: 2, d_ff: 64, num_layers: 1, max_len: 16,
        dropout: 0.0}}
train: {{max_steps: 4, max_tokens: {max_tokens}, schedule: constant, lr: 0.003,
        warmup_steps: 1, log_every: 1, eval_every: 100, save_every: 4}}
"""


@pytest.mark.parametrize("task", ["lm", "mlm"])
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_language_model_tasks_train_data_parallel_like_one_process(setup, task, strategy):
    """Every task gets torchrun: 2 ranks x 4 blocks equal 1 process x 8 blocks (fp64)."""
    root, _, _ = setup
    work = root / f"{task}_{strategy}"
    work.mkdir()
    (work / "tiny.txt").write_text("the cat sat on the mat. the dog sat on the log. " * 30)
    configs = {}
    for name, blocks in (("single", 8), ("ranks", 4)):
        configs[name] = work / f"{name}.yaml"
        configs[name].write_text(
            LM_CONFIG.format(task=task, dir=work, max_tokens=16 * blocks), encoding="utf-8"
        )
    single = work / "single"
    dtype = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        assert main(["train", "--config", str(configs["single"]), "--out", str(single),
                     "--no-progress"]) == 0  # fmt: skip
    finally:
        torch.set_default_dtype(dtype)
    out = work / "ranks"
    _, _, wrapper = setup
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    command = [*launcher, str(wrapper), str(out), str(work / "report"), "train", "--config",
               str(configs["ranks"]), "--out", str(out), "--no-progress", "--set",
               f"train.distributed={strategy}"]  # fmt: skip
    result = subprocess.run(command, env={**os.environ, "OMP_NUM_THREADS": "1"},
                            capture_output=True, text=True, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    _assert_matches(out, single, 4)


def test_every_rank_takes_a_disjoint_share_whose_union_is_the_global_batch():
    batch = [7, 3, 11, 5, 2]
    for world in (1, 2, 3, 4, 6):
        shares = [DistContext(rank=r, world_size=world).shard(batch) for r in range(world)]
        merged = [i for share in shares for i in share]
        assert sorted(merged) == sorted(batch) and len(merged) == len(batch)


def test_the_strategy_is_validated_by_name():
    with pytest.raises(
        ConfigError, match="train.distributed: expected one of ddp, fsdp; got 'zero'"
    ):
        RunConfig.from_dict({"train": {"distributed": "zero"}})
