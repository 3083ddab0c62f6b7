"""Checkpoints whose linears are stored as int4 blocks (``attnkit import --from gguf
--keep-quantized``): the record that says so, and loading them as ``Int4Linear``
(and GGUF Q8_0 blocks as ``Int8BlockLinear``, which runs on the same int4 kernel).

Such a checkpoint is an ordinary one (``attnkit.checkpoints.files``) with two
differences:

* for each linear it names, ``model.safetensors`` holds ``Int4Linear``'s
  portable form in place of ``weight``: ``weight_int4`` ``(N, K/2)`` uint8 (the
  4-bit codes, even inputs in the low nibble), ``weight_scale`` and
  ``weight_zero`` ``(N, K/group)`` fp32, so that ``w = (q - 8) * scale + zero``
  exactly (``attnkit.quantize.int4``);
* for each linear it names under ``int8_linears`` (format 2), ``Int8BlockLinear``'s
  portable form: ``weight_int8`` ``(N, K)`` int8 and ``weight_scale`` ``(N, K/32)``
  fp32, ``w = scale * q`` exactly (``attnkit.quantize.int8_blocks``);
* ``int4.json`` names those linears::

      {"format": 1, "weights": "int4", "group_size": 32,
       "linears": ["decoder.layers.0.self_attn.qkv_proj", ...], "source": "GGUF Q4_1 blocks"}

  (format 2 adds ``"int8_linears": [...]``; a format-1 file has none.)

``load_int4_state`` checks every key and shape against the model its
``config.json`` builds (one ``CheckpointError`` line naming the file, as
``load_model_state``), then installs each named linear as
``Int4Linear.from_codes`` (or ``Int8BlockLinear.from_codes``) with the stored
codes: nothing is rounded again. The
inference plan runs such a checkpoint at ``int4`` unless another precision is
asked for (``attnkit.inference.plan``); any other precision, and a device other
than the CPU, first turns the linears back into float ones holding exactly the
stored weights (``attnkit.quantize.float_linears``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from torch import Tensor, nn

from attnkit import jsonio
from attnkit.checkpoints import safe_files
from attnkit.errors import CheckpointError
from attnkit.quantize.int4 import GROUP_SIZES, Int4Linear, unpack_nibbles
from attnkit.quantize.int8_blocks import BLOCK, INT8_BLOCK_KEYS, Int8BlockLinear

INT4_FILE = "int4.json"
INT4_FORMATS = (1, 2)  # 2: with int8_linears
INT4_KEYS = ("weight_int4", "weight_scale", "weight_zero")
_MAX_RECORD_BYTES = 4 << 20


@dataclass(frozen=True)
class Int4Record:
    """What ``int4.json`` says: the linears stored as int4 blocks (module names), their
    group size, those stored as int8 blocks of 32, and where the blocks came from
    (words, for people)."""

    linears: tuple[str, ...]
    group_size: int
    source: str = ""
    int8_linears: tuple[str, ...] = ()

    def to_json(self) -> str:
        data: dict[str, object] = {
            "format": 2 if self.int8_linears else 1, "weights": "int4",
            "group_size": self.group_size, "linears": list(self.linears),
        }  # fmt: skip
        if self.int8_linears:
            data["int8_linears"] = list(self.int8_linears)
        return jsonio.dumps({**data, "source": self.source}, indent=2)


def read_int4_record(directory: Path) -> Int4Record | None:
    """The ``int4.json`` of checkpoint ``directory`` (None if it has none); a malformed one
    is a ``CheckpointError`` naming the file and the field."""
    file = Path(directory) / INT4_FILE
    if not file.exists():
        return None
    data = safe_files.read_json(file, _MAX_RECORD_BYTES)
    if not isinstance(data, dict):
        raise CheckpointError(f"{file}: expected a JSON object")
    if data.get("format") not in INT4_FORMATS or data.get("weights") != "int4":
        raise CheckpointError(
            f"{file}: format {data.get('format')!r}, weights {data.get('weights')!r}: "
            f"this attnkit reads formats 1 and 2, weights 'int4'"
        )
    lists: dict[str, tuple[str, ...]] = {}
    for field in ("linears", "int8_linears"):
        names = data.get(field, [] if field == "int8_linears" else None)
        if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
            raise CheckpointError(f"{file}: {field}: expected a list of module names")
        lists[field] = tuple(names)
    group = data.get("group_size")
    if group not in GROUP_SIZES:
        raise CheckpointError(f"{file}: group_size: expected one of 32, 64, 128; got {group!r}")
    source = data.get("source", "")
    source = source if isinstance(source, str) else ""
    return Int4Record(lists["linears"], group, source, lists["int8_linears"])


def int4_shapes(out_features: int, in_features: int, group: int) -> dict[str, tuple[int, ...]]:
    """The stored tensors of one ``(out_features, in_features)`` linear, by ``INT4_KEYS``."""
    groups = (out_features, in_features // group)
    return {"weight_int4": (out_features, in_features // 2), "weight_scale": groups,
            "weight_zero": groups}  # fmt: skip


def int8_block_shapes(out_features: int, in_features: int) -> dict[str, tuple[int, ...]]:
    """The stored tensors of one int8-block linear, by ``INT8_BLOCK_KEYS``."""
    return {"weight_int8": (out_features, in_features),
            "weight_scale": (out_features, in_features // BLOCK)}  # fmt: skip


def _parent(model: nn.Module, name: str) -> tuple[nn.Module, str]:
    owner, _, child = name.rpartition(".")
    return (model.get_submodule(owner) if owner else model), child


def _expected_shapes(
    model: nn.Module, record: Int4Record, where: Path
) -> dict[str, tuple[int, ...]]:
    """Every key ``model``'s state takes with ``record``'s linears in their stored forms."""
    expected = {key: tuple(t.shape) for key, t in model.state_dict().items()}
    # (field, names, group, rows multiple): int8 blocks pack 2N rows in sixteens
    kinds = (("linears", record.linears, record.group_size, 16),
             ("int8_linears", record.int8_linears, BLOCK, 8))  # fmt: skip
    for field, names, group, rows in kinds:
        for name in names:
            try:
                linear = model.get_submodule(name)
            except AttributeError:
                why = f"{where}: {field}: {name!r} is no module of the model"
                raise CheckpointError(why) from None
            if type(linear) is not nn.Linear:
                raise CheckpointError(f"{where}: {field}: {name!r} is a "
                                      f"{type(linear).__name__}, not a linear")  # fmt: skip
            if f"{name}.weight" not in expected:
                raise CheckpointError(f"{where}: {name!r} is named twice")
            n, k = expected.pop(f"{name}.weight")
            if k % group or n % rows:
                raise CheckpointError(
                    f"{where}: {field}: {name!r} ({n}, {k}) does not split into groups of "
                    f"{group} (or N is not a multiple of {rows})"
                )
            shapes = int4_shapes(n, k, group) if field == "linears" else int8_block_shapes(n, k)
            expected.update({f"{name}.{key}": shape for key, shape in shapes.items()})
    return expected


def _block_linear(name: str, state: dict[str, Tensor], int8: bool) -> nn.Module:
    """The stored form of linear ``name``, popped from ``state``, as its block linear."""
    bias = state.pop(f"{name}.bias", None)
    if int8:
        q, scale = (state.pop(f"{name}.{k}") for k in INT8_BLOCK_KEYS)
        return Int8BlockLinear.from_codes(q, scale, bias)
    codes, scale, zero = (state.pop(f"{name}.{k}") for k in INT4_KEYS)
    return Int4Linear.from_codes(unpack_nibbles(codes), scale, zero, bias)


def load_int4_state(
    model: nn.Module, state: dict[str, Tensor], record: Int4Record, *, source: Path
) -> None:
    """Load ``state`` into the float ``model`` with ``record``'s linears as ``Int4Linear``
    (its ``int8_linears`` as ``Int8BlockLinear``).

    Every key and shape is checked first (``source``, the weights file, names the
    failure); the linears are then replaced in place and the rest loaded."""
    expected = _expected_shapes(model, record, source.parent / INT4_FILE)
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise CheckpointError(
            f"{source}: does not fit the model its config.json and {INT4_FILE} describe: "
            f"missing {missing[:4]}, unexpected {unexpected[:4]}"
        )
    for key, shape in expected.items():
        if tuple(state[key].shape) != shape:
            raise CheckpointError(f"{source}: {key} has shape {tuple(state[key].shape)}, "
                                  f"expected {shape}")  # fmt: skip
    int8 = set(record.int8_linears)
    blocks = (*record.linears, *record.int8_linears)
    for name in blocks:
        try:
            linear = _block_linear(name, state, name in int8)
        except ValueError as e:
            raise CheckpointError(f"{source}: {name}: {e}") from None
        owner, child = _parent(model, name)
        setattr(owner, child, linear)
    # The block linears are complete; everything else is loaded and was checked above.
    result = model.load_state_dict(state, strict=False)
    left = [k for k in result.missing_keys if k.rpartition(".")[0] not in blocks]
    if left or result.unexpected_keys:
        raise CheckpointError(f"{source}: missing {left[:4]}, unexpected "
                              f"{result.unexpected_keys[:4]}")  # fmt: skip
