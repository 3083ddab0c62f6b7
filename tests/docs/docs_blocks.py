"""Finding the shell blocks of the docs that are marked runnable.

A fenced ``bash``/``sh``/``console`` block right after the HTML comment
``<!-- runnable -->`` (invisible on the rendered page) is run by
``tests/docs/test_runnable_blocks.py``, the blocks of one page in order in one
fresh folder, so a page can train in one block and decode in the next. The
commands users read carry real budgets; the marker may shrink them for the test:
``<!-- runnable replace="--minutes 2.5=>--minutes 0.1; max_steps=600=>max_steps=4" -->``
replaces each ``OLD=>NEW`` in the block before it runs (a replacement that matches
nothing is an error, so the docs and the test cannot drift apart).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

MARKER = re.compile(r"<!--\s*runnable(?:\s+replace=\"(?P<replace>[^\"]*)\")?\s*-->")
FENCE = re.compile(r"^(?P<fence>```+|~~~+)\s*(?P<lang>[\w-]*)")
SHELLS = {"bash", "sh", "shell", "console"}


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    script: str


def _replacements(spec: str | None) -> list[tuple[str, str]]:
    pairs = []
    for part in (spec or "").split(";"):
        if part.strip():
            old, sep, new = part.partition("=>")
            if not sep:
                raise ValueError(f"replace: expected OLD=>NEW, got {part!r}")
            pairs.append((old.strip(), new.strip()))
    return pairs


def runnable_blocks(page: Path) -> list[Block]:
    """The runnable blocks of ``page``, their replacements applied."""
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        marker = MARKER.fullmatch(lines[i].strip())
        if not marker:
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        fence = FENCE.match(lines[j].strip()) if j < len(lines) else None
        if not fence or fence["lang"] not in SHELLS:
            raise ValueError(f"{page}:{i + 1}: <!-- runnable --> not followed by a shell block")
        end = next(
            (k for k in range(j + 1, len(lines)) if lines[k].strip().startswith(fence["fence"])),
            None,
        )
        if end is None:
            raise ValueError(f"{page}:{j + 1}: unclosed code block")
        body = [ln[2:] if ln.startswith("$ ") else ln for ln in lines[j + 1 : end]]
        if fence["lang"] == "console":  # only the commands, not the shown output
            body = [ln[2:] for ln in lines[j + 1 : end] if ln.startswith("$ ")]
        script = "\n".join(body) + "\n"
        for old, new in _replacements(marker["replace"]):
            if old not in script:
                raise ValueError(f"{page}:{i + 1}: replace {old!r} matches nothing in the block")
            script = script.replace(old, new)
        blocks.append(Block(page, j + 1, script))
        i = end + 1
    return blocks
