"""The explorer payload: one example's tokens, n-best list and attention, as compact JSON.

A pure function of token lists and weight arrays (torch tensors, numpy arrays or
nested lists); no model code. :func:`build_payload` validates an
:class:`ExplorerExample` and returns a JSON-able dict, the contract between
whatever produced the attention (a server, a script) and the page.

Shape legend: ``L`` layers, ``H`` heads, ``Tq`` query tokens (rows), ``Tk`` key
tokens (columns). Every weight array of a group is ``(H, Tq, Tk)``.

Payload contract (``format == "attnkit.explorer"``, ``version == 1``)::

    {
      "format": "attnkit.explorer", "version": 1,
      "kind": "seq2seq" | "causal_lm" | "masked_lm",
      "title": str,
      "source": [str, ...],           # source / input tokens
      "target": [str, ...],           # output tokens ([] for encoder-only)
      "output": str,                  # the output text (n-best 1 if not given)
      "nbest": [{"text": str, "score": float}, ...],
      "encoding": {"dtype": "uint8" | "float16", ...},   # how blobs decode, see below
      "groups": [{
        "name": "encoder self-attention" | "decoder self-attention"
                | "cross-attention" | "self-attention",
        "query": "source" | "target" | "sequence",   # token list labelling the rows
        "key":   "source" | "target" | "sequence",   # ... and the columns
        "self": bool,                 # query list == key list
        "layers": L, "heads": H, "shape": [H, Tq, Tk],   # exact shape of one layer's blob
        "weights": [blob, ...],       # L blobs, each (H, Tq, Tk)
        "average": [blob, ...],       # L blobs, each (1, Tq, Tk): mean over heads
        "rollout": [blob, ...] | null,   # L blobs (1, Tq, Tk); self-attention groups only
        "summary": {"entropy" | "distance" | "diagonal" | "first": [[H floats] x L]}
      }, ...]
    }

``"sequence"`` is ``source + target`` (a causal LM's prompt followed by its
continuation). A blob is ``{"data": base64, "scale": base64 | null}``. With
``dtype == "uint8"`` (default) ``data`` holds C-order bytes ``q`` and ``scale``
little-endian float32 row maxima ``s`` of shape ``(H', Tq)``; the weight is
``q / 255 * s`` (error at most ``s / 510 <= 1/510``), so long rows of small
weights keep their contrast. With ``"float16"`` ``data`` is little-endian
float16 and ``scale`` is null. The page decodes a layer's blob only when that
layer is shown. Summaries are defined in :mod:`attnkit.visualize.explorer.summaries`.

Served mode: the page POSTs ``{"text": [str], "beam": int, "nbest": int,
"explore": true}`` to its ``api_url`` and expects a JSON object whose key
``"explore"`` holds one payload (or a list of payloads, one per text; it shows
the first); a key ``"error"`` (str) is shown instead when present.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict

import numpy as np

from attnkit.jsonio import JSON
from attnkit.visualize.explorer.summaries import head_summaries, rollout

__all__ = [
    "GROUP_NAMES",
    "AttentionGroup",
    "ExplorerExample",
    "Hypothesis",
    "build_payload",
    "decode_blob",
    "encode_blob",
]

FORMAT = "attnkit.explorer"
VERSION = 1
KINDS = ("seq2seq", "causal_lm", "masked_lm")
AXES = ("source", "target", "sequence")
# Group names allowed per kind, with the default (query, key) axes of each.
GROUP_NAMES: dict[str, dict[str, tuple[str, str]]] = {
    "seq2seq": {
        "encoder self-attention": ("source", "source"),
        "decoder self-attention": ("target", "target"),
        "cross-attention": ("target", "source"),
    },
    "causal_lm": {"self-attention": ("sequence", "sequence")},
    "masked_lm": {"self-attention": ("source", "source")},
}
_TOLERANCE = 1e-3  # weights may overshoot [0, 1] by float error only


@dataclass
class Hypothesis:
    """One n-best entry: the text and its score (e.g. a length-normalised log-probability)."""

    text: str
    score: float


@dataclass
class AttentionGroup:
    """One attention group: per-layer weights ``(H, Tq, Tk)``, all layers the same shape.

    ``query`` / ``key`` name the token lists labelling rows and columns; ``None``
    takes the default for ``name`` (see ``GROUP_NAMES``). An RNN's attention is
    one group, ``"cross-attention"``, with one layer of one head.
    """

    name: str
    layers: Sequence[Any]
    query: str | None = None
    key: str | None = None


@dataclass
class ExplorerExample:
    """Everything the page shows for one input.

    Attributes:
        kind: ``"seq2seq"``, ``"causal_lm"`` or ``"masked_lm"``.
        source: source / input / prompt tokens.
        target: output tokens (``[]`` for an encoder-only model).
        nbest: hypotheses, best first; ``(text, score)`` tuples are accepted.
        groups: the attention groups (at least one).
        output: the output text; defaults to the first hypothesis.
        title: shown as the page heading.
    """

    kind: str
    source: Sequence[str]
    target: Sequence[str] = ()
    nbest: Sequence[Hypothesis | tuple[str, float]] = ()
    groups: Sequence[AttentionGroup] = field(default_factory=list)
    output: str | None = None
    title: str = ""


def _to_numpy(x: object, name: str) -> np.ndarray:
    """A float64 copy of a torch tensor, numpy array or nested list."""
    if hasattr(x, "detach"):  # torch, without importing it
        x = x.detach().float().cpu().numpy()
    try:
        return np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name}: not a numeric array ({err})") from err


def _axis_tokens(example: ExplorerExample, axis: str) -> list[str]:
    if axis == "sequence":
        return [*example.source, *example.target]
    return list(example.source if axis == "source" else example.target)


def _check_tokens(tokens: object, name: str) -> list[str]:
    if not isinstance(tokens, Sequence) or isinstance(tokens, str):
        raise ValueError(f"{name}: must be a list of str tokens, got {type(tokens).__name__}")
    if not all(isinstance(t, str) for t in tokens):
        raise ValueError(f"{name}: must be a list of str tokens")
    return list(tokens)


def _check_group(
    example: ExplorerExample, g: AttentionGroup, gi: int
) -> tuple[str, str, list[np.ndarray]]:
    """Validate one group; return its axes and its layers as ``(H, Tq, Tk)`` arrays."""
    where = f"groups[{gi}]"
    allowed = GROUP_NAMES[example.kind]
    if g.name not in allowed:
        raise ValueError(
            f"{where}.name: {g.name!r} is not one of {sorted(allowed)} for {example.kind}"
        )
    default_q, default_k = allowed[g.name]
    query, key = g.query or default_q, g.key or default_k
    for axis_name, axis in (("query", query), ("key", key)):
        if axis not in AXES:
            raise ValueError(f"{where}.{axis_name}: {axis!r} is not one of {list(AXES)}")
    n_query, n_key = len(_axis_tokens(example, query)), len(_axis_tokens(example, key))
    if n_query == 0 or n_key == 0:
        raise ValueError(f"{where}: the {query!r} or {key!r} token list is empty")
    if isinstance(g.layers, str) or len(g.layers) == 0:
        raise ValueError(f"{where}.layers: need at least one (heads, T_query, T_key) array")
    arrays: list[np.ndarray] = []
    for li, layer in enumerate(g.layers):
        name = f"{where}.layers[{li}]"
        w = _to_numpy(layer, name)
        if w.ndim != 3:
            raise ValueError(f"{name}: expected (heads, T_query, T_key), got shape {w.shape}")
        if w.shape[1:] != (n_query, n_key):
            raise ValueError(
                f"{name}: shape {tuple(w.shape)} does not match {n_query} {query} tokens (query) "
                f"x {n_key} {key} tokens (key)"
            )
        if arrays and w.shape[0] != arrays[0].shape[0]:
            raise ValueError(f"{name}: {w.shape[0]} heads, but layer 0 has {arrays[0].shape[0]}")
        if w.shape[0] == 0:
            raise ValueError(f"{name}: zero heads")
        if not np.isfinite(w).all():
            raise ValueError(f"{name}: contains NaN or inf")
        if w.min() < -_TOLERANCE or w.max() > 1 + _TOLERANCE:
            raise ValueError(
                f"{name}: weights must lie in [0, 1], got [{w.min():.4g}, {w.max():.4g}]"
            )
        arrays.append(np.clip(w, 0.0, 1.0))
    return query, key, arrays


class Blob(TypedDict):
    """One ``(H, Tq, Tk)`` array of weights, base64 (see the module docstring)."""

    data: str
    scale: str | None  # uint8: the float32 row maxima; float16: None


class Ranked(TypedDict):
    """One hypothesis of the n-best list."""

    text: str
    score: float | None  # None: not finite


def _b64(a: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(a).tobytes()).decode("ascii")


def encode_blob(w: np.ndarray, dtype: Literal["uint8", "float16"] = "uint8") -> Blob:
    """Encode ``(H, Tq, Tk)`` weights in ``[0, 1]`` as one blob (see the module docstring)."""
    w = np.asarray(w, dtype=np.float64)
    if dtype == "float16":
        return {"data": _b64(w.astype("<f2")), "scale": None}
    if dtype != "uint8":
        raise ValueError(f"dtype: {dtype!r} is not 'uint8' or 'float16'")
    scale = w.max(-1).astype("<f4")  # (H, Tq)
    s = scale.astype(np.float64)[..., None]
    q = np.where(s > 0, np.rint(w / np.where(s > 0, s, 1.0) * 255.0), 0.0)
    return {"data": _b64(q.astype(np.uint8)), "scale": _b64(scale)}


def decode_blob(blob: dict[str, Any], shape: Sequence[int], dtype: str = "uint8") -> np.ndarray:
    """Inverse of :func:`encode_blob` (what the page does in JS), for tests and tools."""
    raw = base64.b64decode(blob["data"])
    if dtype == "float16":
        return np.frombuffer(raw, dtype="<f2").astype(np.float64).reshape(shape)
    q = np.frombuffer(raw, dtype=np.uint8).astype(np.float64).reshape(shape)
    scale = np.frombuffer(base64.b64decode(blob["scale"]), dtype="<f4").astype(np.float64)
    return q / 255.0 * scale.reshape(*shape[:-1], 1)


def _round(a: np.ndarray) -> JSON:  # nested lists of floats
    return np.round(a, 6).tolist()


def _check_example(ex: ExplorerExample) -> list[Ranked]:
    """Validate the scalar fields; return the n-best list as dicts."""
    if ex.kind not in KINDS:
        raise ValueError(f"kind: {ex.kind!r} is not one of {list(KINDS)}")
    _check_tokens(ex.source, "source")
    _check_tokens(ex.target, "target")
    if not ex.source:
        raise ValueError("source: needs at least one token")
    nbest: list[Ranked] = []
    for i, h in enumerate(ex.nbest):
        pair = (h.text, h.score) if isinstance(h, Hypothesis) else tuple(h)
        if len(pair) != 2:
            raise ValueError(f"nbest[{i}]: expected a Hypothesis or a (text, score) pair")
        text, score = pair
        if not isinstance(text, str):
            raise ValueError(f"nbest[{i}]: text must be a str")
        try:
            score = float(score)  # type: ignore[arg-type]  # anything float() takes
        except (TypeError, ValueError) as err:
            raise ValueError(f"nbest[{i}]: score must be a number") from err
        nbest.append({"text": text, "score": score if np.isfinite(score) else None})
    if not ex.groups:
        raise ValueError("groups: need at least one attention group")
    names = [g.name for g in ex.groups]
    if len(set(names)) != len(names):
        raise ValueError(f"groups: names must be unique, got {names}")
    return nbest


def build_payload(
    example: ExplorerExample, *, dtype: Literal["uint8", "float16"] = "uint8"
) -> dict[str, object]:
    """Validate ``example`` and turn it into the JSON-able payload described above.

    Raises:
        ValueError: naming the bad field (``kind``, ``source``, ``groups[1].layers[0]``, ...).
    """
    nbest = _check_example(example)
    groups = []
    for gi, g in enumerate(example.groups):
        query, key, layers = _check_group(example, g, gi)
        same = query == key
        averages = [w.mean(0) for w in layers]  # (Tq, Tk) per layer
        stats = [head_summaries(w, same_axis=same) for w in layers]
        rolled = rollout(averages) if same and "self-attention" in g.name else None
        rolled_blobs = None if rolled is None else [encode_blob(r[None], dtype) for r in rolled]
        groups.append(
            {
                "name": g.name,
                "query": query,
                "key": key,
                "self": same,
                "layers": len(layers),
                "heads": int(layers[0].shape[0]),
                "shape": [int(n) for n in layers[0].shape],
                "weights": [encode_blob(w, dtype) for w in layers],
                "average": [encode_blob(a[None], dtype) for a in averages],
                "rollout": rolled_blobs,
                "summary": {k: _round(np.stack([s[k] for s in stats])) for k in stats[0]},
            }
        )
    output = example.output if example.output is not None else (nbest[0]["text"] if nbest else "")
    encoding: dict[str, str] = {"dtype": dtype, "order": "C", "byteorder": "little"}
    if dtype == "uint8":
        encoding["value"] = "data / 255 * scale[row]; scale = float32 row maxima"
    return {
        "format": FORMAT,
        "version": VERSION,
        "kind": example.kind,
        "title": str(example.title),
        "source": list(example.source),
        "target": list(example.target),
        "output": str(output),
        "nbest": nbest,
        "encoding": encoding,
        "groups": groups,
    }
