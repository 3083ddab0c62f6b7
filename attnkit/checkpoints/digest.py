"""The identity of a checkpoint's weights: a SHA-256 of what the file holds.

A run started from a checkpoint (``--init``), a LoRA checkpoint's base and an
engine cache all record which weights they were made from and refuse others.
Hashing the bytes of ``model.safetensors`` is not enough for that: the
safetensors writer keeps the header's ``__metadata__`` in a hash map, so two
saves of the *same* tensors (with more than one metadata key, as a model with
tied weights has) can order that JSON differently, and a re-import of the same
model would be refused as "other weights".

``weights_digest(path)`` therefore hashes the *content*: the header parsed and
re-serialised with sorted keys, then the data bytes (whose layout the header
describes). It reads the file once and also returns the hash of the raw bytes,
which is what attnkit recorded before (``run.json`` and ``adapter.json`` files
written by older versions), so ``WeightsDigest.matches`` accepts either.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from pathlib import Path

from attnkit import jsonio
from attnkit.checkpoints.safe_files import check_safetensors_file
from attnkit.errors import CheckpointError

_CHUNK = 1 << 22
# Versioned so that a later change of the canonical form cannot collide with this one.
_PREFIX = b"attnkit-weights-sha256-v1\n"


@dataclass(frozen=True)
class WeightsDigest:
    """SHA-256 hex digests of one safetensors file.

    Attributes:
        content: of the canonical header and the tensor data: equal for equal
            tensors however the writer ordered its JSON. What attnkit records.
        file: of the file's bytes (what attnkit recorded before 2026-11-27).
    """

    content: str
    file: str

    def matches(self, recorded: str | None) -> bool:
        """Whether ``recorded`` (a content or an older whole-file digest) names these weights."""
        return recorded is not None and recorded in (self.content, self.file)


def weights_digest(path: str | Path) -> WeightsDigest:
    """The digests of the safetensors file at ``path``.

    Raises ``CheckpointError`` naming the file when it cannot be read or is not
    a valid safetensors file (``safe_files.check_safetensors_file``'s checks).
    """
    path = Path(path)
    header_len, header = check_safetensors_file(path)
    canonical = jsonio.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    content = hashlib.sha256(_PREFIX + struct.pack("<Q", len(canonical)) + canonical)
    raw = hashlib.sha256()
    try:
        with path.open("rb") as f:
            raw.update(f.read(8 + header_len))
            while chunk := f.read(_CHUNK):
                raw.update(chunk)
                content.update(chunk)
    except OSError as e:
        raise CheckpointError(f"{path}: cannot read the weights to hash them: "
                              f"{e.strerror or e}") from e  # fmt: skip
    return WeightsDigest(content=content.hexdigest(), file=raw.hexdigest())
