"""Names and ids other formats spell differently: activations and special ids, once for all.

**Activations.** Hugging Face configs name the FFN's nonlinearity
(``activation_function``, ``hidden_act``); ``HF_ACTIVATIONS`` maps each name
to attnkit's ``activation``. HF ``"gelu"`` is the exact erf GELU (``F.gelu``);
``gelu_new``, ``gelu_fast`` and ``gelu_pytorch_tanh`` are the tanh
approximation (GPT-2's), attnkit's ``gelu_tanh``. ``"silu"`` belongs to a
gated FFN (Llama's SwiGLU) only: a plain SiLU FFN (OPUS-MT's ``swish``) is
not an attnkit variant. Exports write the first name listed for each.

**Special ids.** attnkit's configs need distinct pad, BOS and EOS ids, where
GPT-2 has one ``<|endoftext|>`` for BOS and EOS and no pad, and GGUF files
often pad with EOS. ``pick_special_ids`` chooses them one way for every
format (see its doc) and says, in notes, which ids it nominated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from attnkit.errors import CheckpointError, ConfigError

# HF name -> attnkit activation, for a plain two-matrix FFN and for a gated one.
HF_ACTIVATIONS: dict[str, str] = {
    "relu": "relu",
    "gelu": "gelu",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_new": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
}
HF_GATED_ACTIVATIONS: dict[str, str] = {"silu": "swiglu"}


def activation_from_hf(name: object, where: str, *, gated: bool = False) -> str:
    """attnkit's activation for HF's ``name``; ``where`` (``"config.json: hidden_act"``)
    is named in the error for one attnkit lacks."""
    table = HF_GATED_ACTIVATIONS if gated else HF_ACTIVATIONS
    if not isinstance(name, str) or name not in table:
        raise CheckpointError(f"{where}: {name!r} is not supported (supported: {', '.join(table)})")
    return table[name]


def activation_to_hf(activation: str) -> str:
    """HF's name for attnkit's ``activation``; ``ConfigError`` naming the field if none."""
    table = HF_ACTIVATIONS | HF_GATED_ACTIVATIONS
    name = next((hf for hf, ours in table.items() if ours == activation), None)
    if name is None:
        raise ConfigError(f"activation: {activation!r} has no Hugging Face name")
    return name


SPECIAL_ROLES = ("eos_id", "bos_id", "pad_id")


def pick_special_ids(
    candidates: Mapping[str, Sequence[object]], vocab_size: int, *, why: str, where: str
) -> tuple[dict[str, int], list[str]]:
    """Distinct ``pad_id``/``bos_id``/``eos_id`` from a file's ids, and notes on nominated ones.

    ``candidates``: role -> the file's ids for it, best first (``None`` or a
    non-int where the file has none; e.g. pad: its padding id, then its unknown
    id). In the order EOS, BOS, pad, each role takes its first candidate that
    is an id of the vocabulary and not yet taken; a role left without one
    takes the smallest id no role holds, and a note says so (``why``: what the
    file lacks, for the note; ``where``: the file, for the error when the
    vocabulary has fewer than three ids).
    """
    chosen: dict[str, int] = {}
    for role in SPECIAL_ROLES:
        for value in candidates.get(role, ()):
            ok = isinstance(value, int) and not isinstance(value, bool)
            if ok and 0 <= value < vocab_size and value not in chosen.values():  # type: ignore[operator]
                chosen[role] = value  # type: ignore[assignment]
                break
    notes = []
    for role in SPECIAL_ROLES:
        if role not in chosen:
            free = next((i for i in range(vocab_size) if i not in chosen.values()), None)
            if free is None:
                raise CheckpointError(
                    f"{where}: a vocabulary of {vocab_size} ids has no room for distinct "
                    "pad, BOS and EOS ids"
                )
            chosen[role] = free
            notes.append(f"{role}={free} nominated: {why}; attnkit generate never feeds it")
    return {role: chosen[role] for role in ("pad_id", "bos_id", "eos_id")}, notes
