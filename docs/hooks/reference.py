"""MkDocs hook: the CLI and config references, generated from the code at build time.

``reference/cli.md`` comes from the argparse parsers themselves
(``attnkit.cli.main.build_parser``) and ``reference/config.md`` from the config
dataclasses (the run-config sections, the model families' configs, LoRA): every
key with its type, default, the tasks that read it, the comment written beside it
in the source, and the validator's rules read from its ``__post_init__``. Neither
page is checked in, so neither can drift from the code.

``python docs/hooks/reference.py cli|config`` prints a page (what the tests read).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import io
import textwrap
import tokenize
import typing
from typing import Any

PAGES = {"reference/cli.md": "cli", "reference/config.md": "config"}


# -- CLI -------------------------------------------------------------------------------


def _option_row(action: argparse.Action) -> str | None:
    if action.help == argparse.SUPPRESS or isinstance(action, argparse._HelpAction):
        return None
    names = ", ".join(f"`{s}`" for s in action.option_strings) or f"`{action.dest}`"
    if action.option_strings and action.nargs != 0:
        names += f" `{action.metavar or action.dest.upper()}`"
    default = action.default
    shown = (
        "" if default in (None, False, argparse.SUPPRESS) or action.nargs == 0 else f"`{default}`"
    )
    choices = f" (one of: {', '.join(map(str, action.choices))})" if action.choices else ""
    help_text = (action.help or "").replace("|", "\\|").replace("\n", " ")
    if "%(default)" in help_text:
        help_text = help_text.replace("%(default)s", str(default))
    return f"| {names} | {help_text}{choices} | {shown} |"


def cli_reference() -> str:
    """Every ``attnkit`` command: what it does (its module's docstring) and its options."""
    from attnkit.cli.main import COMMANDS, build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    out = [
        "# CLI reference",
        "",
        "Generated from the `attnkit` argument parsers each time the site is built; "
        "`attnkit COMMAND --help` prints the same.",
        "",
        "| command | what it does |",
        "|---|---|",
    ]
    out += [f"| [`{name}`](#{name}) | {help_text} |" for name, (_, help_text) in COMMANDS.items()]
    for name in COMMANDS:
        command = sub.choices.get(name)
        if command is None:  # a command whose module is not built
            continue
        out += ["", f"## {name}", "", "```text", command.format_usage().strip(), "```", ""]
        if command.description:
            out += ["```text", textwrap.dedent(command.description).strip(), "```", ""]
        rows = [r for r in map(_option_row, command._actions) if r]
        if rows:
            out += ["| option | meaning | default |", "|---|---|---|", *rows]
    return "\n".join(out) + "\n"


# -- config ----------------------------------------------------------------------------


def _field_comments(cls: type) -> dict[str, str]:
    """The comments written above or beside each field in ``cls``'s class body."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    own_line: dict[int, str] = {}  # comments alone on their line (they describe what follows)
    trailing: dict[int, str] = {}  # comments after code on the same line
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT and "fmt:" not in tok.string:
            alone = tok.line.strip().startswith("#")
            (own_line if alone else trailing)[tok.start[0]] = tok.string.lstrip("#").strip()
    found: dict[str, str] = {}
    body = ast.parse(source).body[0]
    assert isinstance(body, ast.ClassDef)
    for node in body.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            line = node.lineno
            above = []
            k = line - 1
            while k in own_line:
                above.insert(0, own_line[k])
                k -= 1
            beside = [trailing[line]] if line in trailing else []
            found[node.target.id] = " ".join(above + beside)
    return found


def _rules(cls: type) -> dict[str, list[str]]:
    """The checks ``cls.__post_init__`` makes, per field, read from its source."""
    post = cls.__dict__.get("__post_init__")
    if post is None:
        return {}
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(post)))
    except (OSError, TypeError, SyntaxError):
        return {}
    rules: dict[str, list[str]] = {}

    def text(node: ast.AST) -> str:
        return ast.unparse(node).replace("self.", "")

    for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
        fn = call.func.id if isinstance(call.func, ast.Name) else None
        args = call.args
        if fn == "at_least" and len(args) == 3 and isinstance(args[1], ast.Tuple | ast.List):
            for elt in args[1].elts:
                if isinstance(elt, ast.Constant):
                    rules.setdefault(str(elt.value), []).append(f">= {text(args[2])}")
        elif fn == "in_range" and len(args) >= 4 and isinstance(args[0], ast.Constant):
            closed = any(k.arg == "closed_high" for k in call.keywords)
            bracket = "]" if closed else ")"
            rule = f"in [{text(args[2])}, {text(args[3])}{bracket}"
            rules.setdefault(str(args[0].value), []).append(rule)
        elif fn == "require" and len(args) >= 2 and isinstance(args[0], ast.Constant):
            rules.setdefault(str(args[0].value), []).append(f"`{text(args[1])}`")
    return rules


def _type_name(annotation: Any) -> str:
    from attnkit.validation import _describe

    return _describe(annotation)


def _default(f: dataclasses.Field[Any]) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
        if dataclasses.is_dataclass(value):
            return "(section)"
    else:
        return "required"
    if isinstance(value, tuple):
        value = list(value)
    return "`null`" if value is None else f"`{value!r}`".replace("'", '"')


def _section(
    title: str, cls: type, prefix: str, task_keys: dict[str, tuple[str, ...]]
) -> list[str]:
    hints = typing.get_type_hints(cls)
    comments = _field_comments(cls)
    rules = _rules(cls)
    doc = inspect.getdoc(cls) or ""
    out = ["", f"## {title}", ""]
    if doc and not doc.startswith(cls.__name__ + "("):
        out += [doc, ""]
    out += ["| key | type | default | tasks | rules | meaning |", "|---|---|---|---|---|---|"]
    for f in dataclasses.fields(cls):
        key = f"{prefix}.{f.name}" if prefix else f.name
        tasks = task_keys.get(key) or task_keys.get(prefix) or ()
        cells = [
            f"`{key}`",
            _type_name(hints[f.name]),
            _default(f),
            ", ".join(tasks) if tasks else "all",
            "; ".join(rules.get(f.name, [])),
            comments.get(f.name, ""),
        ]
        out.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return out


def config_reference() -> str:
    """Every config key: run-config sections, LoRA, and each model family's config."""
    from attnkit.adapters.config import LoRAConfig
    from attnkit.models.registry import FAMILIES
    from attnkit.training.config_sections import CorpusConfig, InitConfig
    from attnkit.training.config_tasks import TASK_KEYS, TASKS
    from attnkit.training.runconfig import SECTIONS

    out = [
        "# Config reference",
        "",
        "Generated from the config dataclasses each time the site is built. A run file "
        "(`attnkit train --config FILE_OR_RECIPE`) has the sections `task`, `data`, "
        "`tokenizer`, `model`, `train`, `decode` and `init`; `--set SECTION.KEY=VALUE` "
        "overrides any key. An unknown key names the nearest valid one; a key that does "
        "not apply to the run's task is refused. *tasks* says which tasks read a key "
        "(all: every task); *rules* are the validator's checks beyond the type.",
        "",
        f"Tasks: {', '.join(f'`{t}`' for t in TASKS)}.",
    ]
    for name, cls in SECTIONS.items():
        out += _section(f"`{name}`", cls, name, TASK_KEYS)
    out += _section("`data.corpora[]`", CorpusConfig, "data.corpora[]", TASK_KEYS)
    out += _section("`train.lora`", LoRAConfig, "train.lora", TASK_KEYS)
    out += _section("`init`", InitConfig, "init", TASK_KEYS)
    out += [
        "",
        "## `model`, per family",
        "",
        "The `model` section holds the keys of the family's config (or `preset: NAME`); "
        "a checkpoint stores its whole config in `config.json`.",
    ]
    for family in FAMILIES.values():
        out += _section(f"`model` ({family.name})", family.config_class, "model", {})
    return "\n".join(out) + "\n"


def page(kind: str) -> str:
    return cli_reference() if kind == "cli" else config_reference()


# -- MkDocs hook -----------------------------------------------------------------------


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    for uri, kind in PAGES.items():
        files.append(File.generated(config, uri, content=page(kind)))
    return files


if __name__ == "__main__":
    import sys

    print(page(sys.argv[1] if len(sys.argv) > 1 else "cli"), end="")
