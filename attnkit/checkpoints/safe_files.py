"""Reading and writing the files a checkpoint is made of, safely.

* safetensors, validated before parsing: a pickle or ``torch.save`` zip is
  refused unread, the header length is capped (``MAX_HEADER_BYTES``) and must
  fit the file, and the described data must match the file size. Tied
  tensors are stored once and come back as one tensor.
* JSON trees with tensor leaves: a tensor becomes ``{"__tensor__": "dotted.path"}``
  (the tensor lives under that key in the ``.safetensors`` beside the JSON) and
  a tuple ``{"__tuple__": [...]}``, so tuples come back as tuples.
* Text and JSON written with fsync, and read only under a size limit.

Nothing here unpickles. ``attnkit.checkpoints.files`` builds checkpoint
directories out of these files.
"""

from __future__ import annotations

import json
import os
import stat
import struct
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType

import numpy as np
import torch
from torch import Tensor

from attnkit import jsonio
from attnkit.errors import CheckpointError
from attnkit.jsonio import JSON
from attnkit.output_paths.atomic import current_umask
from attnkit.output_paths.policy import as_os_error

MAX_HEADER_BYTES = 100 * 1024 * 1024  # a real header is KBs; refuse before parsing a bomb
# Formats that torch.load would unpickle: named in errors, never opened.
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
_ALIASES_KEY = "attnkit.aliases"


# -- safetensors (lazy import, validated reading) ------------------------------------


def _safetensors() -> ModuleType:
    try:
        import safetensors.torch
    except ImportError as e:
        raise CheckpointError(
            "checkpoints need the safetensors package: pip install 'attnkit[train]'"
        ) from e
    return safetensors


def _dedup_for_save(tensors: Mapping[str, Tensor]) -> tuple[dict[str, Tensor], dict[str, str]]:
    """Drop exact aliases (tied weights) and unshare the rest for safetensors.

    safetensors refuses tensors that share storage. A key that is the *same*
    view as an earlier key (same storage, offset, shape, strides, dtype: e.g.
    the output projection tied to the target embedding) is recorded as an
    alias and not stored; on load both keys point at one tensor, which
    ``load_state_dict(strict=True)`` accepts. Other tensors are made
    contiguous and cloned if they still share storage.
    """
    kept: dict[str, Tensor] = {}
    aliases: dict[str, str] = {}
    # (device, data pointer, dtype, shape, stride): the same view of the same memory
    seen: dict[tuple[torch.device, int, torch.dtype, tuple[int, ...], tuple[int, ...]], str] = {}
    storage_users: dict[tuple[torch.device, int], int] = {}
    for key, t in tensors.items():
        if not isinstance(t, Tensor):
            raise CheckpointError(f"{key}: expected a tensor, got {type(t).__name__}")
        t = t.detach()
        if t.numel() > 0:
            ident = (t.device, t.data_ptr(), t.dtype, tuple(t.shape), tuple(t.stride()))
            if ident in seen:
                aliases[key] = seen[ident]
                continue
            seen[ident] = key
            storage = (t.device, t.untyped_storage().data_ptr())
            storage_users[storage] = storage_users.get(storage, 0) + 1
        kept[key] = t
    out = {}
    for key, t in kept.items():
        shared = t.numel() > 0 and storage_users[(t.device, t.untyped_storage().data_ptr())] > 1
        partial = t.untyped_storage().nbytes() != t.numel() * t.element_size()
        if shared or partial or not t.is_contiguous():
            t = t.clone(memory_format=torch.contiguous_format)
        out[key] = t.to("cpu")
    return out, aliases


def save_tensors(path: str | Path, tensors: Mapping[str, Tensor]) -> None:
    """Write ``tensors`` to a safetensors file (tied tensors stored once) and fsync it."""
    path = Path(path)
    data, aliases = _dedup_for_save(tensors)
    metadata = {"format": "pt"}
    if aliases:
        metadata[_ALIASES_KEY] = jsonio.dumps(aliases, sort_keys=True)
    try:
        _safetensors().torch.save_file(data, str(path), metadata=metadata)
    except Exception as e:  # SafetensorError (Rust): a write failure hides its errno
        os_error = as_os_error(e, path)
        if os_error is None:
            raise
        raise os_error from e
    os.chmod(path, 0o666 & ~current_umask())  # safetensors writes a 0600 temporary, renamed
    fsync_file(path)


def check_safetensors_file(path: Path) -> tuple[int, dict[str, object]]:
    """Refuse pickles and malformed files before safetensors parses them.

    Returns the header's length in bytes and the header, parsed.
    """
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            head = f.read(9)
            if len(head) < 9:
                raise CheckpointError(f"{path}: truncated ({size} bytes), not a safetensors file")
            (header_len,) = struct.unpack("<Q", head[:8])
            # A header of 640 bytes starts b"\x80\x02": a pickle's first two bytes. Byte 8
            # decides: "{" opens a safetensors header, while a pickle has a frame length there.
            if _is_pickle(head) and not (head[8:9] == b"{" and 8 + header_len <= size):
                raise CheckpointError(f"{path}: {_describe_non_safetensors(head, size)}")
            # The length prefix is untrusted: cap it before comparing or reading.
            if header_len > MAX_HEADER_BYTES:
                raise CheckpointError(
                    f"{path}: safetensors header of {header_len} bytes exceeds the "
                    f"{MAX_HEADER_BYTES}-byte limit (corrupt or crafted file)"
                )
            looks_like_header = head[8:9] == b"{" and 8 + header_len <= size
            if not looks_like_header:
                raise CheckpointError(f"{path}: {_describe_non_safetensors(head, size)}")
            f.seek(8)
            header_bytes = f.read(header_len)
    except OSError as e:
        raise CheckpointError(f"{path}: cannot read: {e.strerror or e}") from e
    try:
        header = json.loads(header_bytes)
        ends = [
            int(info["data_offsets"][1]) for key, info in header.items() if key != "__metadata__"
        ]
    except (ValueError, TypeError, KeyError, IndexError) as e:
        raise CheckpointError(f"{path}: corrupt safetensors header ({e})") from e
    expected = 8 + header_len + max(ends, default=0)
    if expected != size:
        raise CheckpointError(
            f"{path}: file is {size} bytes but its header describes {expected} "
            "(truncated or corrupt)"
        )
    return header_len, header


def _is_pickle(head: bytes) -> bool:
    """A pickle (protocol 2-5) or a zip archive, which is how ``torch.save`` stores one."""
    return (head[:1] == b"\x80" and 2 <= head[1] <= 5) or head[:4] == b"PK\x03\x04"


def _describe_non_safetensors(head: bytes, size: int) -> str:
    if head[:1] == b"\x80" and 2 <= head[1] <= 5:
        return "is a Python pickle, not safetensors; refusing to unpickle (unsafe)"
    if head[:4] == b"PK\x03\x04":
        return "is a zip archive (torch.save format), not safetensors; refusing to unpickle"
    return f"not a safetensors file or truncated ({size} bytes)"


def _missing_tensors_error(path: Path) -> CheckpointError:
    """``path`` does not exist; name a pickle-format file beside it, which we never load."""
    parent = path.parent
    pickles = (
        sorted(p.name for p in parent.iterdir() if p.suffix in PICKLE_SUFFIXES and p.is_file())
        if parent.is_dir()
        else []
    )
    if pickles:
        return CheckpointError(
            f"{path}: file not found; {parent / pickles[0]} is a pickle-based format that "
            "attnkit never loads (unpickling can run code); convert it to safetensors "
            "with a tool you trust"
        )
    return CheckpointError(f"{path}: file not found")


def load_tensors(path: str | Path) -> dict[str, Tensor]:
    """Read a safetensors file onto the CPU after validating it; tied keys share one tensor."""
    path = Path(path)
    if not path.exists():
        raise _missing_tensors_error(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: not a file")
    check_safetensors_file(path)
    st = _safetensors()
    try:
        with st.safe_open(str(path), framework="pt") as f:
            metadata = f.metadata() or {}
            tensors = {key: f.get_tensor(key) for key in f.keys()}
    except Exception as e:  # SafetensorError and friends: one line, naming the file
        raise CheckpointError(f"{path}: corrupt safetensors file ({e})") from e
    try:
        aliases = json.loads(metadata.get(_ALIASES_KEY, "{}"))
        for key, target in aliases.items():
            tensors[key] = tensors[target]
    except (ValueError, KeyError, AttributeError, TypeError) as e:
        raise CheckpointError(f"{path}: bad tied-tensor metadata ({e})") from e
    return tensors


def tensor_names(path: str | Path) -> set[str]:
    """The keys ``load_tensors`` would return (tied keys included), reading the header only."""
    path = Path(path)
    if not path.is_file():
        raise _missing_tensors_error(path)
    check_safetensors_file(path)
    try:
        with _safetensors().safe_open(str(path), framework="pt") as f:
            metadata = f.metadata() or {}
            names = set(f.keys())
        return names | set(json.loads(metadata.get(_ALIASES_KEY, "{}")))
    except Exception as e:  # SafetensorError, bad metadata: one line, naming the file
        raise CheckpointError(f"{path}: corrupt safetensors file ({e})") from e


# -- JSON trees with tensor leaves ----------------------------------------------------


def _encode(obj: object, path: str, tensors: dict[str, Tensor]) -> JSON:
    """JSON-ready copy of ``obj``; tensors move to ``tensors`` under their dotted path."""
    if isinstance(obj, Tensor):
        if path in tensors:
            raise CheckpointError(f"{path}: two tensors would be stored under this key")
        tensors[path] = obj
        return {"__tensor__": path}
    if isinstance(obj, tuple):
        return {"__tuple__": [_encode(v, f"{path}.{i}", tensors) for i, v in enumerate(obj)]}
    if isinstance(obj, list):
        return [_encode(v, f"{path}.{i}", tensors) for i, v in enumerate(obj)]
    if isinstance(obj, Mapping):
        out: dict[str, JSON] = {}
        for key, value in obj.items():
            if not isinstance(key, str):
                raise CheckpointError(f"{path}: key {key!r} is not a string; JSON cannot keep it")
            out[key] = _encode(value, f"{path}.{key}" if path else key, tensors)
        return out
    if isinstance(obj, np.generic):
        item: JSON = obj.item()  # numpy leaves item() untyped: a Python scalar
        return item
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise CheckpointError(f"{path}: cannot store a {type(obj).__name__} (not JSON or a tensor)")


def _decode(obj: object, tensors: Mapping[str, Tensor], file: Path) -> object:
    if isinstance(obj, list):
        return [_decode(v, tensors, file) for v in obj]
    if isinstance(obj, dict):
        if obj.keys() == {"__tensor__"}:
            key = obj["__tensor__"]
            if key not in tensors:
                raise CheckpointError(
                    f"{file}: refers to tensor {key!r}, missing from its .safetensors"
                )
            return tensors[key]
        if obj.keys() == {"__tuple__"}:
            return tuple(_decode(v, tensors, file) for v in obj["__tuple__"])
        return {k: _decode(v, tensors, file) for k, v in obj.items()}
    return obj


def write_tree(directory: Path, stem: str, tree: Mapping[str, object]) -> None:
    """``tree`` as ``stem.json``, with its tensor leaves in ``stem.safetensors``."""
    tensors: dict[str, Tensor] = {}
    encoded = _encode(tree, "", tensors)
    if tensors:
        save_tensors(directory / f"{stem}.safetensors", tensors)
    write_json(directory / f"{stem}.json", encoded)


def read_tree(
    directory: Path, stem: str, limit: int, what: str = "a saved tree"
) -> dict[str, object] | None:
    """Undo ``write_tree``; None without a ``stem.json``, an error past ``limit`` bytes
    or when the file holds no object (``what`` it should have been, for the message)."""
    json_path = directory / f"{stem}.json"
    if not json_path.exists():
        return None
    encoded = read_json(json_path, limit)
    tensor_path = directory / f"{stem}.safetensors"
    tensors = load_tensors(tensor_path) if tensor_path.exists() else {}
    tree = _decode(encoded, tensors, json_path)
    if not isinstance(tree, dict):  # write_tree writes a mapping: this file was not its
        raise CheckpointError(
            f"{json_path}: not {what} (a JSON {type(tree).__name__}, not an object)"
        )
    return tree


# -- files and atomic directories ----------------------------------------------------


def fsync_file(path: Path) -> None:
    with path.open("rb") as f:
        os.fsync(f.fileno())


def write_json(path: Path, obj: object) -> None:
    try:
        text = jsonio.dumps(obj, indent=2, ensure_ascii=False)
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{path.name}: cannot write as JSON ({e})") from e
    write_text(path, text + "\n")


def write_text(path: Path, text: str) -> None:
    with path.open("w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def read_json(path: Path, limit: int) -> object:
    return parse_json(read_text(path, limit), path)


def read_text(path: Path, limit: int) -> str:
    """The UTF-8 text of ``path``, refused unread when it is over ``limit`` bytes."""
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):  # a FIFO would block the read forever
            raise CheckpointError(f"{path}: not a regular file; not reading it")
        size = st.st_size
        if size > limit:
            raise CheckpointError(
                f"{path}: {size} bytes exceeds the {limit}-byte limit for {path.name} "
                "(corrupt or crafted file); not reading it"
            )
        return path.read_text(encoding="utf-8")
    except FileNotFoundError as e:
        raise CheckpointError(f"{path}: file not found") from e
    except UnicodeDecodeError as e:
        raise CheckpointError(f"{path}: not UTF-8 text ({e})") from e
    except OSError as e:
        raise CheckpointError(f"{path}: cannot read: {e.strerror or e}") from e


def parse_json(text: str, path: Path) -> object:
    try:
        return json.loads(text)
    except ValueError as e:
        raise CheckpointError(f"{path}: invalid JSON ({e})") from e
    except RecursionError:
        raise CheckpointError(f"{path}: JSON nested too deeply (corrupt or crafted file)") from None
