"""Writing pictures: a PNG in a folder made for it, the figure closed afterwards."""

from __future__ import annotations

import pytest

from attnkit.visualize.figures import pyplot, save_figure

pytest.importorskip("matplotlib")


def test_save_figure_writes_a_png_and_closes_the_figure(tmp_path):
    plt = pyplot()
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    path = save_figure(fig, tmp_path / "new" / "curve.png")
    assert path == tmp_path / "new" / "curve.png"
    assert path.read_bytes().startswith(b"\x89PNG")
    assert fig.number not in plt.get_fignums()  # no figure left open per picture
