"""The run configuration of ``attnkit train``: YAML sections as typed dataclasses.

A run file has the sections ``task``, ``data``, ``tokenizer``, ``model``,
``train`` and ``decode``. Every key is checked by the one validator
(``attnkit.validation``): an unknown key names the nearest valid one, a wrong
type or out-of-range value names the field (``train.max_tokens: must be >= 1,
got 0``), and a key that does not apply to the run's task is refused, never
silently ignored (``train.label_smoothing: applies to task translation, not
lm``). ``--set train.max_steps=100`` overrides any key from the command line.

Here: ``RunConfig`` (the whole file), ``--set`` and reading the YAML. The
sections' dataclasses are ``attnkit.training.config_sections`` (data,
tokenizer, decode, init) and ``config_train`` (train); the tasks and the keys
only some of them read, ``config_tasks``. Every name is importable from here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnkit import jsonio
from attnkit.errors import ConfigError
from attnkit.training.config_sections import (
    MAX_GRAD_ACCUM,
    MAX_MINUTES,
    MAX_THREADS,
    MAX_VOCAB_SIZE,
    SEED_LIMIT,
    CorpusConfig,
    DataConfig,
    DecodeConfig,
    InitConfig,
    TokenizerConfig,
)
from attnkit.training.config_tasks import (
    IMAGE_TASKS,
    LM_TASKS,
    SEQ2SEQ_TEXT,
    TASK_KEYS,
    TASKS,
    TEXT_CLASSIFICATION,
    TEXT_TO_TEXT_CORPUS_KEYS,
    Task,
    check_task_keys,
)
from attnkit.training.config_train import TrainConfig
from attnkit.validation import from_mapping, suggest

# Every name importable from here, as before the sections and the task keys moved out
# (attnkit.training.config_sections, config_train and config_tasks).
__all__ = [
    "IMAGE_TASKS",
    "LM_TASKS",
    "MAX_GRAD_ACCUM",
    "MAX_MINUTES",
    "MAX_THREADS",
    "MAX_VOCAB_SIZE",
    "SECTIONS",
    "SEED_LIMIT",
    "SEQ2SEQ_TEXT",
    "TASKS",
    "TASK_KEYS",
    "TEXT_CLASSIFICATION",
    "TEXT_TO_TEXT_CORPUS_KEYS",
    "CorpusConfig",
    "DataConfig",
    "DecodeConfig",
    "InitConfig",
    "RunConfig",
    "Task",
    "TokenizerConfig",
    "TrainConfig",
    "apply_overrides",
    "load_run_config",
    "parse_override",
]


SECTIONS: dict[str, type] = {
    "data": DataConfig,
    "tokenizer": TokenizerConfig,
    "train": TrainConfig,
    "decode": DecodeConfig,
}


VERSION_KEY = "attnkit"  # run.json's record of the attnkit version that wrote it


@dataclass
class RunConfig:
    task: str = "translation"
    data: DataConfig = field(default_factory=DataConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    # As written (an empty section: the task's default preset, e.g. "small"); with
    # `init` only the keys named here are checked against the checkpoint's model.
    model: dict[str, object] = field(default_factory=dict)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    init: InitConfig | None = None  # start from a checkpoint's weights

    @classmethod
    def from_dict(cls, data: Any) -> RunConfig:
        """Validate a raw mapping (YAML after ``--set``) into a run config."""
        if not isinstance(data, dict):
            raise ConfigError("config: expected a mapping at the top level")
        known = ["task", "model", "init", *SECTIONS]
        # run.json names the attnkit that wrote it (``to_json``); a record, not a setting
        data = {k: v for k, v in data.items() if k != VERSION_KEY}
        for key in data:
            if key not in known:
                raise ConfigError(f"{key}: unknown section{suggest(str(key), known)}")
        task = data.get("task", "translation")
        if task not in TASKS:
            raise ConfigError(f"task: expected one of {', '.join(TASKS)}, got {task!r}")
        model = data.get("model") or {}
        if not isinstance(model, dict):
            raise ConfigError("model: expected a mapping")
        built: dict[str, Any] = {k: from_mapping(c, data.get(k), k) for k, c in SECTIONS.items()}
        check_task_keys(task, data)
        init = data.get("init")
        if init is not None:
            init = from_mapping(InitConfig, {"path": init} if isinstance(init, str) else init,
                                "init")  # fmt: skip
        return cls(task=task, model=dict(model), init=init, **built)

    def to_dict(self) -> dict[str, object]:
        """Every key that applies to the task (so a run's ``run.json`` reloads as a config)."""
        data = dataclasses.asdict(self)
        if self.init is None:
            data.pop("init")
        for name, tasks in TASK_KEYS.items():
            if self.task not in tasks:
                section, _, key = name.partition(".")
                if key:
                    data[section].pop(key, None)
                else:
                    data.pop(section, None)
        if self.task != "text_to_text" and data["data"].get("corpora"):
            for corpus in data["data"]["corpora"]:  # keys only text_to_text reads
                for key in TEXT_TO_TEXT_CORPUS_KEYS:
                    corpus.pop(key, None)
        return data

    def to_json(self) -> str:
        """``run.json``: ``to_dict`` and the version of attnkit that wrote it."""
        from attnkit import __version__

        return jsonio.dumps({VERSION_KEY: __version__, **self.to_dict()}, indent=2)


def parse_override(text: str) -> tuple[list[str], object]:
    """``"train.max_steps=100"`` -> ``(["train", "max_steps"], 100)`` (value parsed as YAML,
    numbers as users write them: ``train.lr=1e-3`` is a float)."""
    import yaml

    from attnkit.training.config_yaml import parse_yaml

    if "=" not in text:
        raise ConfigError(f"--set {text}: expected key=value, e.g. train.max_steps=1000")
    key, raw = text.split("=", 1)
    if not all(part.strip() for part in key.split(".")):
        raise ConfigError(f"--set {text}: expected SECTION.KEY=VALUE, e.g. train.max_steps=1000")
    try:
        value = parse_yaml(raw) if raw else ""
    except yaml.YAMLError:
        value = raw
    except RecursionError:
        raise ConfigError(f"--set {key}: value nested too deeply") from None
    return key.strip().split("."), value


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``--set`` overrides to the raw config mapping (before validation)."""
    for text in overrides:
        path, value = parse_override(text)
        node = data
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"--set {text}: {part} is not a section")
        node[path[-1]] = value
    return data


def config_path(given: str | Path) -> Path:
    """The file ``--config`` names: a path when a file is there, else a packaged recipe
    (``attnkit.recipes``: ``multi30k_de_en_cpu``); neither is a one-line ``ConfigError``."""
    from attnkit import recipes
    from attnkit.validation import suggest

    p = Path(given)
    if p.is_file():
        return p
    recipe = None if p.exists() else recipes.find(str(given))
    if recipe is not None:
        return recipe
    if p.exists():
        raise ConfigError(f"{p}: is not a regular file")
    hint = suggest(p.name.removesuffix(recipes.SUFFIX), recipes.names())
    raise ConfigError(
        f"{p}: config file not found, and no packaged recipe has that name{hint} "
        "(attnkit config list shows them)"
    )


def load_run_config(path: str | Path | None, overrides: list[str] | None = None) -> RunConfig:
    """Read a YAML run config (or start from defaults), apply overrides, validate.

    ``path`` is a file or the name of a packaged recipe (``config_path``).
    """
    import yaml

    from attnkit.output_paths import describe_os_error
    from attnkit.training.config_yaml import parse_yaml

    data: Any = {}
    if path is not None:
        p = config_path(path)
        try:
            data = parse_yaml(p.read_text(encoding="utf-8")) or {}
        except RecursionError:
            raise ConfigError(f"{p}: nested too deeply to be a run config") from None
        except OSError as e:
            raise ConfigError(f"{p}: cannot read ({describe_os_error(e)})") from None
        except UnicodeDecodeError as e:
            raise ConfigError(f"{p}: not UTF-8 text (byte {e.start})") from None
        except yaml.YAMLError as e:
            where = getattr(e, "problem_mark", None)
            line = f" line {where.line + 1}, column {where.column + 1}" if where else ""
            # PyYAML's own words for what is wrong ("mapping values are not allowed here").
            problem = getattr(e, "problem", None) or ""
            detail = f" ({problem})" if problem else ""
            raise ConfigError(f"{p}{line}: not valid YAML{detail}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{p}: expected a mapping at the top level")
    return RunConfig.from_dict(apply_overrides(data, overrides or []))
