"""The run configs that ship with attnkit (recipes): list them, print one.

Every command that takes --config accepts a recipe's name as well as a path
(a file at that path wins). Print a recipe to start your own from it.

Examples:
  attnkit config list
  attnkit config show multi30k_de_en_cpu
  attnkit config show sst2_minilm > my_sst2.yaml
  attnkit train --config multi30k_de_en_cpu --set data.dir=data/multi30k
"""

from __future__ import annotations

import argparse
import sys

from attnkit import recipes
from attnkit.errors import UsageError
from attnkit.validation import suggest


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "action", choices=("list", "show"), help="list the recipes, or show one's YAML"
    )
    parser.add_argument("name", nargs="?", help="the recipe to show (see 'attnkit config list')")


def run(args: argparse.Namespace) -> int:
    if args.action == "list":
        if args.name is not None:
            raise UsageError("config list: takes no NAME (to print one: attnkit config show NAME)")
        names = recipes.names()
        width = max(map(len, names), default=0)
        for name in names:
            print(f"{name:<{width}}  {recipes.summary(name)}".rstrip())
        return 0
    if args.name is None:
        raise UsageError("config show: name a recipe (attnkit config list shows them)")
    path = recipes.find(args.name)
    if path is None:
        hint = suggest(args.name.removesuffix(recipes.SUFFIX), recipes.names())
        raise UsageError(
            f"config show: no packaged recipe {args.name!r}{hint} (attnkit config list)"
        )
    sys.stdout.write(path.read_text(encoding="utf-8"))
    return 0
