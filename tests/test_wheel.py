"""A wheel that stands alone: built from the sources, installed into a fresh virtual
environment, run with no repository in sight.

``python -m build`` makes the sdist and the wheel (``--no-isolation``: the build
backend already installed here, so no download). The virtual environment sees the
system's packages (``--system-site-packages``: torch and the rest are not installed
again) but gets attnkit only from the wheel (``--no-deps``), and every command runs
from a folder outside the repository with ``PYTHONPATH`` unset, so the ``attnkit``
that answers is the wheel's: what ``pip install attnkit[train]`` gives a user.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import attnkit
from attnkit import recipes

ROOT = Path(__file__).resolve().parents[1]


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{argv}: {done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.mark.slow
def test_the_wheel_installs_and_runs_without_the_repository(tmp_path):
    pytest.importorskip("build")
    src = tmp_path / "src"  # a copy: building writes build/ and *.egg-info beside the sources
    shutil.copytree(ROOT / "attnkit", src / "attnkit",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))  # fmt: skip
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    dist = tmp_path / "dist"
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(src)],
         tmp_path, env)  # fmt: skip
    [sdist] = dist.glob("attnkit-*.tar.gz")
    [wheel] = dist.glob("attnkit-*.whl")
    assert wheel.name.startswith(f"attnkit-{attnkit.__version__}-")
    names = set(zipfile.ZipFile(wheel).namelist())
    # the recipes and the explorer's assets are package data: in the wheel, found by name
    assert {f"attnkit/recipes/{n}.yaml" for n in recipes.names()} <= names
    assert {"attnkit/__init__.pyi", "attnkit/visualize/explorer/assets/explorer.html"} <= names

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)],
         tmp_path, env)  # fmt: skip
    python = venv / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
          "--no-index", "--quiet", str(wheel)], tmp_path, env)  # fmt: skip
    home = tmp_path / "user"  # nowhere near the repository
    home.mkdir()
    where = _run([str(python), "-c", "import attnkit; print(attnkit.__file__)"], home, env)
    assert Path(where.stdout.strip()).is_relative_to(venv)
    cli = str(venv / "bin" / "attnkit")
    assert _run([cli, "--version"], home, env).stdout == f"attnkit {attnkit.__version__}\n"
    shown = _run([cli, "config", "show", "vit_digits"], home, env).stdout
    assert shown == (recipes.RECIPES / "vit_digits.yaml").read_text(encoding="utf-8")

    # a packaged recipe, by name (its data ships with scikit-learn), for a few steps
    _run([cli, "train", "--config", "vit_digits", "--out", "vit", "--no-progress",
          "--set", "train.max_steps=2", "--set", "train.eval_every=2"], home, env)  # fmt: skip
    run = json.loads((home / "vit" / "run.json").read_text())
    assert run["attnkit"] == attnkit.__version__ and run["task"] == "image_classification"
    state = json.loads(
        next((home / "vit" / "checkpoints").glob("*/trainer_state.json")).read_text()
    )
    assert state["attnkit"] == attnkit.__version__

    # the quickstart's task is generated in code: nothing to fetch, nothing beside the wheel
    _run([cli, "quickstart", "--out", "qs", "--minutes", "0.5", "--max-steps", "40",
          "--train-size", "1200", "--test-size", "10", "--no-progress"], home, env)  # fmt: skip
    assert json.loads((home / "qs" / "metrics.json").read_text())["steps"] >= 1
    assert sdist.stat().st_size > 0
