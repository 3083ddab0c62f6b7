"""Position information: absolute (sinusoidal, the paper's; learned) and relative (Shaw)."""

from attnkit.positions.learned import LearnedPositions
from attnkit.positions.relative import (
    NoPositions,
    RelativePositions,
    RelativePositionTerms,
    relative_index,
)
from attnkit.positions.sinusoidal import SinusoidalPositions, sinusoidal_table

AbsolutePositions = SinusoidalPositions | LearnedPositions | NoPositions


def build_positions(kind: str, max_len: int, d_model: int) -> AbsolutePositions:
    """Absolute position module by name: ``"sinusoidal"``, ``"learned"`` or ``"none"``.

    ``"none"`` is for relative-only models: their positions live in attention.
    """
    table: dict[str, type[AbsolutePositions]] = {
        "sinusoidal": SinusoidalPositions,
        "learned": LearnedPositions,
        "none": NoPositions,
    }
    if kind not in table:
        raise ValueError(f"positions: unknown kind {kind!r}; choose from {sorted(table)}")
    return table[kind](max_len, d_model)


__all__ = [
    "AbsolutePositions",
    "LearnedPositions",
    "NoPositions",
    "RelativePositionTerms",
    "RelativePositions",
    "SinusoidalPositions",
    "build_positions",
    "relative_index",
    "sinusoidal_table",
]
