"""Opening a GGUF file safely and quickly, and its metadata as Python values.

``open_gguf`` returns a ``gguf.GGUFReader`` (llama.cpp's own Python reader)
after three checks that turn every bad file into one ``CheckpointError`` line
naming it: the magic bytes; a walk over the header (metadata and tensor
table) that proves every length and count fits inside the file, because the
reader trusts them (a flipped bit in an array count makes it build a Python
list of 2^40 indices and exhaust memory); and, after parsing, that every
tensor's bytes end inside the file (truncation).

Layout (GGUF v2/v3, little-endian): ``"GGUF"``, version u32, tensor count
u64, metadata count u64; each metadata entry is a key string, a value type
u32 and the value; strings are a u64 byte length and UTF-8 bytes; arrays are
an element type u32, a count u64 and the elements. Then each tensor's name,
dimension count u32, dims u64 each, ggml type u32 and data offset u64.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np

from attnkit.errors import CheckpointError

if TYPE_CHECKING:
    from gguf import GGUFReader, ReaderField

# A metadata value as ``field_value`` gives it (a bool is an int here too).
GGUFValue: TypeAlias = int | float | str | list[int] | list[float] | list[str]

# GGUF value types with a fixed width: u8 i8 u16 i16 u32 i32 f32 bool u64 i64 f64.
_WIDTH = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9
_MAX_DIMS = 8  # ggml has 4; anything past a few is a corrupt count


class _Corrupt(Exception):
    pass


def _check_layout(blob: np.ndarray, blocks: dict[int, tuple[str, int]]) -> None:
    """Walk the header; raise ``_Corrupt`` if a length or count runs past the end, or a
    tensor's rows do not split into the blocks of its type (``blocks``: ggml type ->
    its name and block size)."""
    size = len(blob)
    pos = 0

    def take(fmt: str) -> tuple:
        nonlocal pos
        width = struct.calcsize(fmt)
        if pos + width > size:
            raise _Corrupt(f"header ends early at byte {pos}")
        out = struct.unpack_from(fmt, blob, pos)  # type: ignore[arg-type]  # ndarray: a buffer
        pos += width
        return out

    def skip_string() -> None:
        nonlocal pos
        (length,) = take("<Q")
        if length > size - pos:
            raise _Corrupt(f"a string of {length} bytes at byte {pos} runs past the end")
        pos += length

    def skip_value(kind: int, depth: int = 0) -> None:
        nonlocal pos
        if kind in _WIDTH:
            take(f"<{_WIDTH[kind]}s")
        elif kind == _STRING:
            skip_string()
        elif kind == _ARRAY and depth < 4:
            element, count = take("<IQ")
            smallest = _WIDTH.get(element, 8)  # a string or an array takes at least 8 bytes
            if count > (size - pos) // smallest:
                raise _Corrupt(f"an array of {count} elements at byte {pos} runs past the end")
            if element in _WIDTH:
                pos += count * _WIDTH[element]
            else:
                for _ in range(count):
                    skip_value(element, depth + 1)
        else:
            raise _Corrupt(f"unknown value type {kind} at byte {pos}")

    magic, version, tensors, entries = take("<4sIQQ")
    if version not in (2, 3):
        raise _Corrupt(f"GGUF version {version} (2 and 3 are known; big-endian files are not)")
    if entries > size // 13 or tensors > size // 24:  # the smallest entry / tensor info
        raise _Corrupt(f"{entries} metadata entries and {tensors} tensors cannot fit")
    for _ in range(entries):
        skip_string()
        (kind,) = take("<I")
        skip_value(kind)
    for _ in range(tensors):
        start = pos
        skip_string()
        name = bytes(blob[start + 8 : pos]).decode("utf-8", "replace")
        (dims,) = take("<I")
        if dims > _MAX_DIMS:
            raise _Corrupt(f"a tensor with {dims} dimensions at byte {pos}")
        *shape, kind, _ = take(f"<{dims}QIQ")
        kind_name, block = blocks.get(kind, ("", 1))
        if shape and shape[0] % block:  # ggml never writes one; the reader's error names none
            raise _Corrupt(f"tensor {name}: rows of {shape[0]} values do not split into "
                           f"{kind_name} blocks of {block}")  # fmt: skip


def _plain_view_reader(gguf: Any) -> type[GGUFReader]:
    """``gguf.GGUFReader`` over a plain ndarray view of its file map: 3-4x faster to open.

    The reader slices its ``np.memmap`` once per metadata string (~100k for a
    49k-token vocabulary), and every ``np.memmap`` slice pays for
    ``__array_finalize__``; a base-class view of the same map does not. The
    bytes, and the laziness of the map, are unchanged. If a later ``gguf``
    stops storing the map as ``self.data``, this is merely the plain reader.
    """

    class PlainViewReader(gguf.GGUFReader):
        @property
        def data(self) -> np.ndarray:
            return self._plain_data

        @data.setter
        def data(self, value: np.ndarray) -> None:
            self._plain_data = np.asarray(value)

    return PlainViewReader


def open_gguf(path: Path) -> GGUFReader:
    """A ``gguf.GGUFReader`` for ``path``; a missing, foreign or corrupt file is one line."""
    try:
        import gguf
    except ImportError as e:
        raise CheckpointError(f"{path}: reading GGUF needs the `gguf` package ({e})") from e
    if not path.is_file():
        raise CheckpointError(f"{path}: no such file")
    with path.open("rb") as fh:
        magic = fh.read(4)
    if magic != b"GGUF":
        raise CheckpointError(f"{path}: not a GGUF file (starts with {magic!r}, expected b'GGUF')")
    try:
        blocks = {int(t): (t.name, size) for t, (size, _) in gguf.GGML_QUANT_SIZES.items()}
        _check_layout(np.memmap(path, mode="r"), blocks)
        reader = _plain_view_reader(gguf)(path)
    except (_Corrupt, ValueError, IndexError, KeyError, OverflowError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path}: truncated or corrupt GGUF file ({e})") from e
    size = os.path.getsize(path)
    for t in reader.tensors:
        if int(t.data_offset) + int(t.n_bytes) > size:
            raise CheckpointError(f"{path}: truncated: tensor {t.name} ends past the file end")
    return reader


def field_value(reader_field: ReaderField) -> GGUFValue:
    """A metadata value as Python: int/float/bool/str, or a list for arrays."""
    from gguf import GGUFValueType

    kinds, parts = reader_field.types, reader_field.parts
    if kinds[0] == GGUFValueType.ARRAY:
        if len(kinds) > 1 and kinds[-1] == GGUFValueType.STRING:
            return [bytes(parts[i]).decode("utf-8") for i in reader_field.data]
        return [parts[i][0].item() for i in reader_field.data]
    if kinds[0] == GGUFValueType.STRING:
        return bytes(parts[reader_field.data[0]]).decode("utf-8")
    return parts[reader_field.data[0]][0].item()


def metadata_values(path: Path, reader: GGUFReader) -> dict[str, GGUFValue]:
    """Every metadata key -> its Python value; a non-UTF-8 string is one line."""
    try:
        return {key: field_value(f) for key, f in reader.fields.items()}
    except UnicodeDecodeError as e:
        raise CheckpointError(f"{path}: metadata holds a string that is not UTF-8 ({e})") from e
