"""Position information: sinusoidal (the paper's) and learned absolute positions."""

from torch import nn

from attnkit.positions.learned import LearnedPositions
from attnkit.positions.sinusoidal import SinusoidalPositions, sinusoidal_table


def build_positions(kind: str, max_len: int, d_model: int) -> nn.Module:
    """Absolute position module by name: ``"sinusoidal"`` or ``"learned"``."""
    table = {"sinusoidal": SinusoidalPositions, "learned": LearnedPositions}
    if kind not in table:
        raise ValueError(f"positions: unknown kind {kind!r}; choose from {sorted(table)}")
    return table[kind](max_len, d_model)


__all__ = ["LearnedPositions", "SinusoidalPositions", "build_positions", "sinusoidal_table"]
