"""The ``attnkit`` command. Each subcommand lives in its own module under ``attnkit.cli``.

Every error prints one line on stderr and exits with 2 (usage) or 1 (runtime),
without a traceback unless ``--debug`` is given: ``attnkit.cli.boundary``.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import sys
from collections.abc import Sequence
from typing import NoReturn

from attnkit import __version__
from attnkit.cli.boundary import run_command

# Subcommand name -> module with `add_arguments(parser)` and `run(args) -> int`.
# A plain dict: the registry lives at the edge, modules are imported lazily so
# `attnkit --help` stays fast.
COMMANDS: dict[str, tuple[str, str]] = {
    "quickstart": ("attnkit.cli.quickstart", "train a small Transformer on an embedded task"),
    "train": ("attnkit.cli.train", "train a model from a YAML config"),
    "prepare": ("attnkit.cli.prepare", "prepare a config's training data ahead (cached ids)"),
    "translate": ("attnkit.cli.translate", "translate text with a trained checkpoint"),
    "summarize": ("attnkit.cli.summarize", "write a short summary of each text"),
    "evaluate": ("attnkit.cli.evaluate", "score a checkpoint (BLEU/chrF, or perplexity)"),
    "attention": ("attnkit.cli.attention", "draw an attention heatmap"),
    "average": ("attnkit.cli.average", "average the weights of several checkpoints"),
    "generate": ("attnkit.cli.generate", "continue a prompt with a decoder-only checkpoint"),
    "fill-mask": ("attnkit.cli.fill_mask", "fill in [MASK] tokens with a masked-LM checkpoint"),
    "classify": ("attnkit.cli.classify", "label texts with a text-classification checkpoint"),
    "embed": ("attnkit.cli.embed", "turn sentences into vectors (sentence embeddings)"),
    "tag": ("attnkit.cli.tag", "tag the words of sentences (named entities)"),
    "answer": ("attnkit.cli.answer", "answer questions from a context (extractive QA)"),
    "export": ("attnkit.cli.export", "export a checkpoint to transformers, ONNX or CTranslate2"),
    "import": ("attnkit.cli.import_", "import pretrained weights (Hugging Face, GGUF)"),
    "explore": ("attnkit.cli.explore", "write the attention explorer for one text (HTML)"),
    "serve": ("attnkit.cli.serve", "serve a checkpoint over HTTP (API + explorer)"),
    "merge": ("attnkit.cli.merge", "fold a LoRA checkpoint's adapters into full weights"),
    "data": ("attnkit.cli.data", "list and download the public corpora the recipes use"),
    "config": ("attnkit.cli.config", "list the packaged run configs (recipes), print one"),
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # exit code 2, one line, no usage dump
        self.exit(2, f"{self.prog}: error: {message}\n")


class _Formatter(argparse.HelpFormatter):
    """Keeps each command name and its help on one line in ``attnkit --help``.

    argparse sizes the name column from the top-level options only, so the
    (longer, more indented) command names would otherwise wrap.
    """

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=26)

    def add_argument(self, action: argparse.Action) -> None:
        super().add_argument(action)
        self._action_max_length = max(self._action_max_length, 22)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="attnkit",
        description=(
            "Train, decode and inspect Transformer models "
            '("Attention Is All You Need" and its family).'
        ),
        epilog="Run 'attnkit COMMAND --help' for a command's options.",
        formatter_class=_Formatter,
    )
    parser.add_argument("--version", action="version", version=f"attnkit {__version__}")
    parser.add_argument(
        "--debug", action="store_true", help="show full tracebacks instead of one-line errors"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, (module_name, help_text) in COMMANDS.items():
        module = _load(module_name)
        if module is None:
            continue
        # Raw: the module docs' examples stay one per line (argparse would refill them).
        p = sub.add_parser(
            name,
            help=help_text,
            description=module.__doc__,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        # SUPPRESS: without --debug here, keep the top-level value (`attnkit --debug CMD`).
        p.add_argument(
            "--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS
        )
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def _load(module_name: str):
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name == module_name:  # command not built yet
            return None
        raise


def _unrecognized(parser: argparse.ArgumentParser, command: str, extras: list[str]) -> str:
    """One line naming the unknown arguments, the nearest option and where to look."""
    message = f"attnkit {command}: error: unrecognized arguments: {' '.join(extras)}"
    sub = next(
        (a.choices[command] for a in parser._actions if isinstance(a, argparse._SubParsersAction)),
        None,
    )
    options = list(sub._option_string_actions) if sub is not None else []
    unknown = next((e.split("=", 1)[0] for e in extras if e.startswith("-")), None)
    close = difflib.get_close_matches(unknown, options, n=1) if unknown else []
    if close:
        message += f"; did you mean {close[0]}?"
    return message + f" (see 'attnkit {command} --help')\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    if extras:
        if args.command is None:
            parser.error(f"unrecognized arguments: {' '.join(extras)} (see 'attnkit --help')")
        parser.exit(2, _unrecognized(parser, args.command, extras))
    if args.command is None:
        parser.print_help()
        return 0
    return run_command(args.command, lambda: args._run(args), debug=args.debug)


if __name__ == "__main__":
    sys.exit(main())
