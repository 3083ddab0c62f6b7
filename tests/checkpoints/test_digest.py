"""Weights digests: equal for equal tensors however the safetensors header is ordered."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

import pytest
import torch
from lora_helpers import lora_run

from attnkit.checkpoints import MODEL_FILE, load_model, load_tensors
from attnkit.checkpoints.adapters import ADAPTER_FILE, weights_sha256
from attnkit.checkpoints.digest import weights_digest
from attnkit.checkpoints.safe_files import save_tensors
from attnkit.errors import CheckpointError
from attnkit.training.warm_start import load_warm_start


def _reorder_header(path: Path) -> None:
    """Rewrite ``path`` with its header's keys (and the metadata's) in reverse order:
    what another safetensors save of the same tensors may produce (its metadata is a
    hash map), the data bytes untouched."""
    blob = path.read_bytes()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + n])
    reordered = {k: header[k] for k in reversed(list(header))}
    if "__metadata__" in reordered:
        meta = reordered["__metadata__"]
        reordered["__metadata__"] = {k: meta[k] for k in reversed(list(meta))}
    text = json.dumps(reordered).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + blob[8 + n :])


def _tied(tmp_path: Path, name: str, scale: float = 1.0) -> Path:
    """Two tensors and an alias (tied weights): two metadata keys, as a tied model has."""
    torch.manual_seed(0)
    shared = torch.randn(5, 3) * scale
    path = tmp_path / name
    save_tensors(path, {"emb.weight": shared, "out.weight": shared, "bias": torch.zeros(3)})
    return path


def test_a_reordered_header_keeps_the_content_digest_and_changes_the_file_digest(tmp_path):
    path = _tied(tmp_path, "a.safetensors")
    before = weights_digest(path)
    assert before.file == hashlib.sha256(path.read_bytes()).hexdigest()
    _reorder_header(path)
    after = weights_digest(path)
    assert after.file != before.file  # the bytes differ...
    assert after.content == before.content  # ...the tensors do not
    assert set(load_tensors(path)) == {"emb.weight", "out.weight", "bias"}


def test_other_values_give_another_content_digest(tmp_path):
    a = weights_digest(_tied(tmp_path, "a.safetensors"))
    b = weights_digest(_tied(tmp_path, "b.safetensors", scale=2.0))
    assert a.content != b.content and a.file != b.file


def test_matches_accepts_the_content_and_the_older_file_digest(tmp_path):
    digest = weights_digest(_tied(tmp_path, "a.safetensors"))
    assert digest.matches(digest.content) and digest.matches(digest.file)
    assert not digest.matches("0" * 64) and not digest.matches(None)


@pytest.mark.parametrize(
    "blob, words", [(b"\x01", "truncated"), (struct.pack("<Q", 10) + b"{oops", "truncated"),
                    (struct.pack("<Q", 5) + b"{oops", "corrupt safetensors header")],
)  # fmt: skip
def test_a_broken_file_is_a_one_line_error_naming_it(tmp_path, blob, words):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(blob)
    with pytest.raises(CheckpointError, match=words) as e:
        weights_digest(path)
    assert str(e.value).startswith(str(path)) and "\n" not in str(e.value)


def test_a_lora_base_saved_again_with_another_header_order_is_accepted(tmp_path):
    base, out, adapted = lora_run(tmp_path)
    recorded = json.loads((out / ADAPTER_FILE).read_text())["base"]["sha256"]
    assert recorded == weights_sha256(base)
    _reorder_header(base / MODEL_FILE)
    ids = torch.randint(3, 20, (2, 7))
    with torch.no_grad():
        torch.testing.assert_close(load_model(out, "cpu").model(ids).logits,
                                   adapted.eval()(ids).logits, atol=1e-5, rtol=0)  # fmt: skip


def test_a_lora_checkpoint_recording_the_older_file_digest_still_loads(tmp_path):
    base, out, _ = lora_run(tmp_path)
    info = json.loads((out / ADAPTER_FILE).read_text())
    info["base"]["sha256"] = hashlib.sha256((base / MODEL_FILE).read_bytes()).hexdigest()
    (out / ADAPTER_FILE).write_text(json.dumps(info))
    load_model(out, "cpu")


def test_load_initial_records_the_content_digest_and_accepts_either(tmp_path):
    base, _, _ = lora_run(tmp_path)
    old = hashlib.sha256((base / MODEL_FILE).read_bytes()).hexdigest()
    initial = load_warm_start(base, expected_sha256=old)
    assert initial.source.sha256 == weights_sha256(base) != old
    _reorder_header(base / MODEL_FILE)
    load_warm_start(base, expected_sha256=initial.source.sha256)
    with pytest.raises(CheckpointError, match="sha256"):
        load_warm_start(base, expected_sha256=old)  # the old bytes are gone
