"""Write an export or import directory all at once: the output-path policy's staged directory.

``staged_directory(out)`` yields a hidden ``.NAME.tmp-*`` directory beside
``out`` (same filesystem). When the block ends without error it is fsynced
and swapped in for ``out``; on any error it is removed and ``out`` keeps what
it held, so ``out`` never names a half-written export. The mechanism (and its
crash windows) is ``attnkit.output_paths``'s, shared with checkpoint directories;
this module keeps the import path the exporters and importers use.
"""

from __future__ import annotations

from pathlib import Path

from attnkit.output_paths import check_replaceable_dir, staged_directory


def check_target(out: Path, *, overwrite: bool) -> None:
    """``UsageError`` unless ``out`` may be (re)written as a directory; changes nothing."""
    check_replaceable_dir(out, overwrite=overwrite)


__all__ = ["check_target", "staged_directory"]
