"""Checkpoints whose linears are stored as int4 blocks (``attnkit import --from gguf
--keep-quantized``): the record that says so, and loading them as ``Int4Linear``.

Such a checkpoint is an ordinary one (``attnkit.checkpoints.files``) with two
differences:

* for each linear it names, ``model.safetensors`` holds ``Int4Linear``'s
  portable form in place of ``weight``: ``weight_int4`` ``(N, K/2)`` uint8 (the
  4-bit codes, even inputs in the low nibble), ``weight_scale`` and
  ``weight_zero`` ``(N, K/group)`` fp32, so that ``w = (q - 8) * scale + zero``
  exactly (``attnkit.quantize.int4``);
* ``int4.json`` names those linears::

      {"format": 1, "weights": "int4", "group_size": 32,
       "linears": ["decoder.layers.0.self_attn.qkv_proj", ...], "source": "GGUF Q4_1 blocks"}

``load_int4_state`` checks every key and shape against the model its
``config.json`` builds (one ``CheckpointError`` line naming the file, as
``load_model_state``), then installs each named linear as
``Int4Linear.from_codes`` with the stored codes: nothing is rounded again. The
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

INT4_FILE = "int4.json"
INT4_FORMAT = 1
INT4_KEYS = ("weight_int4", "weight_scale", "weight_zero")
_MAX_RECORD_BYTES = 4 << 20


@dataclass(frozen=True)
class Int4Record:
    """What ``int4.json`` says: the linears stored as int4 blocks (module names), their
    group size, and where the blocks came from (words, for people)."""

    linears: tuple[str, ...]
    group_size: int
    source: str = ""

    def to_json(self) -> str:
        return jsonio.dumps(
            {"format": INT4_FORMAT, "weights": "int4", "group_size": self.group_size,
             "linears": list(self.linears), "source": self.source},
            indent=2,
        )  # fmt: skip


def read_int4_record(directory: Path) -> Int4Record | None:
    """The ``int4.json`` of checkpoint ``directory`` (None if it has none); a malformed one
    is a ``CheckpointError`` naming the file and the field."""
    file = Path(directory) / INT4_FILE
    if not file.exists():
        return None
    data = safe_files.read_json(file, _MAX_RECORD_BYTES)
    if not isinstance(data, dict):
        raise CheckpointError(f"{file}: expected a JSON object")
    if data.get("format") != INT4_FORMAT or data.get("weights") != "int4":
        raise CheckpointError(
            f"{file}: format {data.get('format')!r}, weights {data.get('weights')!r}: "
            f"this attnkit reads format {INT4_FORMAT}, weights 'int4'"
        )
    linears = data.get("linears")
    if not isinstance(linears, list) or not all(isinstance(n, str) and n for n in linears):
        raise CheckpointError(f"{file}: linears: expected a list of module names")
    group = data.get("group_size")
    if group not in GROUP_SIZES:
        raise CheckpointError(f"{file}: group_size: expected one of 32, 64, 128; got {group!r}")
    source = data.get("source", "")
    return Int4Record(tuple(linears), group, source if isinstance(source, str) else "")


def int4_shapes(out_features: int, in_features: int, group: int) -> dict[str, tuple[int, ...]]:
    """The stored tensors of one ``(out_features, in_features)`` linear, by ``INT4_KEYS``."""
    groups = (out_features, in_features // group)
    return {"weight_int4": (out_features, in_features // 2), "weight_scale": groups,
            "weight_zero": groups}  # fmt: skip


def _parent(model: nn.Module, name: str) -> tuple[nn.Module, str]:
    owner, _, child = name.rpartition(".")
    return (model.get_submodule(owner) if owner else model), child


def load_int4_state(
    model: nn.Module, state: dict[str, Tensor], record: Int4Record, *, source: Path
) -> None:
    """Load ``state`` into the float ``model`` with ``record``'s linears as ``Int4Linear``.

    Every key and shape is checked first (``source``, the weights file, names the
    failure); the linears are then replaced in place and the rest loaded."""
    where = source.parent / INT4_FILE
    expected = {key: tuple(t.shape) for key, t in model.state_dict().items()}
    for name in record.linears:
        try:
            linear = model.get_submodule(name)
        except AttributeError:
            raise CheckpointError(f"{where}: linears: {name!r} is no module of the model") from None
        if type(linear) is not nn.Linear:
            raise CheckpointError(f"{where}: linears: {name!r} is a {type(linear).__name__}, "
                                  "not a linear")  # fmt: skip
        out_features, in_features = expected.pop(f"{name}.weight")
        if in_features % record.group_size or out_features % 16:
            raise CheckpointError(
                f"{where}: linears: {name!r} ({out_features}, {in_features}) does not split "
                f"into groups of {record.group_size} (or N is not a multiple of 16)"
            )
        shapes = int4_shapes(out_features, in_features, record.group_size)
        expected.update({f"{name}.{k}": shape for k, shape in shapes.items()})
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
    for name in record.linears:
        codes, scale, zero = (state.pop(f"{name}.{k}") for k in INT4_KEYS)
        bias = state.get(f"{name}.bias")
        try:
            int4 = Int4Linear.from_codes(unpack_nibbles(codes), scale, zero, bias)
        except ValueError as e:
            raise CheckpointError(f"{source}: {name}: {e}") from None
        state.pop(f"{name}.bias", None)
        owner, child = _parent(model, name)
        setattr(owner, child, int4)
    # The int4 linears are complete; everything else is loaded and was checked above.
    result = model.load_state_dict(state, strict=False)
    left = [k for k in result.missing_keys if k.rpartition(".")[0] not in record.linears]
    if left or result.unexpected_keys:
        raise CheckpointError(f"{source}: missing {left[:4]}, unexpected "
                              f"{result.unexpected_keys[:4]}")  # fmt: skip
