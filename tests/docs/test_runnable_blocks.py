"""Every shell block the docs mark ``<!-- runnable -->`` runs and exits 0 (with the
marker's smaller budgets), so the commands users copy cannot rot. ``docs_blocks``
says how blocks are marked."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from docs_blocks import runnable_blocks

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
WITH_BLOCKS = [p for p in PAGES if runnable_blocks(p)]


def test_marker_parsing(tmp_path):
    page = tmp_path / "p.md"
    page.write_text(
        'text\n<!-- runnable replace="--minutes 2=>--minutes 0.1" -->\n```bash\n'
        "attnkit quickstart --minutes 2\n```\n\n```bash\nnot run\n```\n"
        "<!-- runnable -->\n```console\n$ echo hi\nhi\n```\n",
        encoding="utf-8",
    )
    blocks = runnable_blocks(page)
    assert [b.script for b in blocks] == ["attnkit quickstart --minutes 0.1\n", "echo hi\n"]
    page.write_text('<!-- runnable replace="nothing=>x" -->\n```bash\necho\n```\n', "utf-8")
    with pytest.raises(ValueError, match="matches nothing"):
        runnable_blocks(page)


@pytest.mark.slow
@pytest.mark.parametrize("page", WITH_BLOCKS, ids=[str(p.relative_to(ROOT)) for p in WITH_BLOCKS])
def test_runnable_blocks_pass(page, tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    for block in runnable_blocks(page):
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", block.script], cwd=tmp_path, env=env,
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        where = f"{page.relative_to(ROOT)}:{block.line}"
        assert done.returncode == 0, f"{where} exited {done.returncode}:\n{done.stderr[-2000:]}"
