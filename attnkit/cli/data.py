"""Get the public corpora the recipes and examples use, checked against pinned digests.

``attnkit data list`` shows each corpus: its size, license and source.
``attnkit data get NAME`` downloads it from its public source (pinned URLs and
SHA-256 digests in attnkit/data/corpora.json), resumably, checks every file,
converts it into the layout the configs read and installs it into
``data/NAME`` (or ``--to DIR``); an interrupted or failed run installs nothing
(run it again to resume). Its license is printed: read it before you use the data.
Set ATTNKIT_DATA_MIRROR=URL to fetch from a mirror holding URL/NAME/FILE.

Examples:
  attnkit data list
  attnkit data get multi30k
  attnkit train --config configs/multi30k_de_en_cpu.yaml --set data.dir=data/multi30k
"""

from __future__ import annotations

import argparse
from pathlib import Path

from attnkit import jsonio


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="data_command", metavar="ACTION", required=True,
                                parser_class=type(parser))  # fmt: skip
    get = sub.add_parser("get", help="download, check and install a corpus")
    get.add_argument("name", metavar="NAME", help="a corpus of 'attnkit data list'")
    get.add_argument("--to", metavar="DIR", help="where to install it (default: data/NAME)")
    get.add_argument("--no-progress", action="store_true", help="no progress bar")
    listing = sub.add_parser("list", help="the corpora 'data get' knows")
    listing.add_argument("--json", action="store_true", help="one JSON object per corpus")


def _size(n: int | None) -> str:
    if n is None:
        return "?"
    return f"{n / (1 << 20):.1f} MiB" if n >= 1 << 20 else f"{n / 1024:.0f} KiB"


def _list(as_json: bool) -> int:
    from attnkit.data.corpora import load_table

    table = load_table()
    if as_json:
        for c in table.values():
            print(jsonio.dumps({"name": c.name, "title": c.title, "task": c.task,
                              "download_bytes": c.download_size,
                              "installed_bytes": c.installed_size, "license": c.license,
                              "license_url": c.license_url, "source": c.source,
                              "unpinned": c.unpinned}))  # fmt: skip
        return 0
    rows = [("NAME", "SIZE", "TASK", "LICENSE", "SOURCE")]
    for c in table.values():
        rows.append((c.name, _size(c.installed_size or c.download_size), c.task,
                     c.license.split(";")[0].split(" (")[0], c.source))  # fmt: skip
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for r in rows:
        print("  ".join(r[i].ljust(widths[i]) for i in range(4)) + "  " + r[4])
    return 0


def _get(name: str, to: str | None, progress: bool) -> int:
    from attnkit.data.corpora import find_corpus, load_table
    from attnkit.data.corpus_install import install

    corpus = find_corpus(name, load_table())
    folder = Path(to) if to else Path("data") / corpus.name
    print(f"{corpus.name}: {corpus.title}")
    print(f"license: {corpus.license} ({corpus.license_url})")
    if not install(corpus, folder, progress=progress):
        print(f"{corpus.name} is already in {folder} (every file checked)")
    else:
        print(f"installed {corpus.name} in {folder} ({len(corpus.files)} files checked)")
        if corpus.unpinned:
            print(f"note: the table pins no digest for {', '.join(corpus.unpinned)}; "
                  f"{folder}/attnkit-data.json records what was downloaded")  # fmt: skip
    print(f"use it with: {corpus.use.replace(f'data/{corpus.name}', str(folder))}")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.data_command == "list":
        return _list(args.json)
    return _get(args.name, args.to, progress=not args.no_progress)
