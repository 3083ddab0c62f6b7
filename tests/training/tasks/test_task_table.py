"""The one task table (``attnkit.training.tasks.TASK_CLASSES``): every task the run config
accepts has one entry, whose class builds itself from a run (``from_run``)."""

from __future__ import annotations

import inspect

from attnkit.training.config_tasks import TASKS
from attnkit.training.tasks import TASK_CLASSES


def test_every_configurable_task_has_one_entry():
    assert sorted(TASK_CLASSES) == sorted(TASKS)


def test_each_entry_is_named_as_its_class_and_builds_itself():
    for name, cls in TASK_CLASSES.items():
        assert cls.name == name
        builder = inspect.getattr_static(cls, "from_run")
        assert isinstance(builder, classmethod), name
        assert list(inspect.signature(cls.from_run).parameters) == ["given"], name
