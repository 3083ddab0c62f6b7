"""The run configs that ship inside the package, found by name.

Every ``*.yaml`` file in this folder is a recipe named by its stem:
``attnkit train --config multi30k_de_en_cpu`` reads ``multi30k_de_en_cpu.yaml``
from here, ``attnkit config list`` lists them and ``attnkit config show NAME``
prints one to start your own from. Adding a recipe is dropping a YAML file
into this folder (the wheel's package data takes ``*.yaml``); there is no list
to keep in step.

A path always wins: ``--config`` names a file when one exists there, and only
otherwise a recipe (``attnkit.training.runconfig.load_run_config``). In a
clone, ``configs/`` is a link to this folder, so ``--config
configs/NAME.yaml`` keeps working for scripts and records that say so.
"""

from __future__ import annotations

from pathlib import Path

RECIPES = Path(__file__).resolve().parent
SUFFIX = ".yaml"


def names() -> list[str]:
    """The packaged recipes' names, sorted."""
    return sorted(p.stem for p in RECIPES.glob(f"*{SUFFIX}") if p.is_file())


def find(name: str) -> Path | None:
    """The packaged recipe ``name`` (``"sst2_minilm"`` or ``"sst2_minilm.yaml"``), or
    ``None`` when ``name`` is not one (a path with a folder in it never is)."""
    stem = name.removesuffix(SUFFIX)
    if not stem or "/" in name or "\\" in name or stem.startswith("."):
        return None
    path = RECIPES / f"{stem}{SUFFIX}"
    return path if path.is_file() else None


def summary(name: str) -> str:
    """The first line of a recipe's leading comment (what ``config list`` shows)."""
    path = find(name)
    if path is None:
        return ""
    for line in path.read_text(encoding="utf-8").splitlines():
        text = line.lstrip("# ").rstrip()
        if not line.startswith("#"):
            return ""
        if text:
            return text
    return ""
