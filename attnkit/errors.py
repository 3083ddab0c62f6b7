"""Errors that the CLI turns into one-line messages (no traceback).

Every message names what is wrong (a file, line or field) and, where it can,
what to do about it.
"""

from __future__ import annotations


class AttnkitError(Exception):
    """Base class for errors meant for the user, not for a traceback."""

    exit_code = 1


class UsageError(AttnkitError, ValueError):
    """Bad command-line arguments or option values (exit code 2)."""

    exit_code = 2


class ConfigError(AttnkitError, ValueError):
    """A configuration value is invalid; the message names the field."""

    exit_code = 2


class DataError(AttnkitError, ValueError):
    """A data file is missing or malformed; the message names file and line."""


class CheckpointError(AttnkitError, ValueError):
    """A checkpoint is missing, truncated, unsafe or incompatible."""


class TrainingError(AttnkitError):
    """Training cannot go on (e.g. the loss stayed non-finite); the last checkpoint is intact."""


class OutputError(AttnkitError):
    """Writing an output failed (full disk, read-only filesystem, permission denied);
    the message names the path, and the path keeps what it held."""


class EngineError(AttnkitError):
    """Another inference engine cannot run here (it crashed or failed on this machine);
    the message names the engine, its version and the CPU."""
