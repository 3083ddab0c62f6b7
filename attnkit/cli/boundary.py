"""The CLI's one error boundary: any exception becomes one stderr line and an exit code.

``run_command`` wraps a subcommand. What reaches it:

* ``AttnkitError``: its own message and exit code (2 usage/config, 1 runtime);
* ``BrokenPipeError`` (``attnkit translate ... | head -1``): the reader has
  gone, so nothing is printed; standard output is pointed at ``/dev/null`` so
  the interpreter's final flush does not print "Exception ignored" either;
* ``OSError`` (a full disk, a read-only filesystem, permission denied, a
  path under a file, ...): ``PATH: reason``, exit 1;
* ``MemoryError`` and PyTorch's allocation failures: out of memory, exit 1;
* pathlib's symbolic-link loop (a ``RuntimeError`` before Python 3.13): ``PATH: a
  symbolic link loop``, exit 1;
* ``UnicodeError`` (standard output that cannot encode the text, standard
  input that is not UTF-8), ``RecursionError``, ``OverflowError`` and
  safetensors' ``SafetensorError``: one line saying which, exit 1;
* anything else: one line naming the exception, with ``--debug`` for the
  traceback, exit 1.

``--debug`` re-raises instead, so the traceback shows. The message is one
line whatever the exception says (newlines are folded) and is printed even
when stderr cannot encode it.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable

from attnkit.errors import AttnkitError

MAX_MESSAGE = 2000  # characters; a message longer than this is cut (one line, readable)


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 3] + "..."


def _os_error(e: OSError) -> str:
    from attnkit.output_paths import describe_os_error

    paths = [os.fsdecode(p) for p in (e.filename, e.filename2) if p is not None]
    where = " -> ".join(paths) or "system call"
    return f"{where}: {describe_os_error(e)}"


def _allocation_failure(e: BaseException) -> bool:
    """PyTorch reports a failed allocation as a ``RuntimeError`` (CPU) or
    ``torch.OutOfMemoryError`` (CUDA), not as ``MemoryError``."""
    if type(e).__name__ == "OutOfMemoryError":
        return True
    text = str(e)
    return isinstance(e, RuntimeError) and (
        "can't allocate memory" in text or "out of memory" in text.lower()
    )


def _symlink_loop(e: BaseException) -> str | None:
    """The path of pathlib's ``RuntimeError("Symlink loop from '...'")`` (Python < 3.13
    ``Path.resolve``; 3.13 raises ``OSError(ELOOP)``), else ``None``."""
    prefix = "Symlink loop from "
    text = str(e)
    if type(e) is not RuntimeError or not text.startswith(prefix):
        return None
    return text[len(prefix) :].strip("'\"")


def _unicode(e: UnicodeError) -> str:
    if isinstance(e, UnicodeEncodeError):
        return (
            f"cannot write this text as {e.encoding} (character {e.object[e.start : e.end]!a}); "
            "set PYTHONIOENCODING=utf-8 or a UTF-8 locale"
        )
    if isinstance(e, UnicodeDecodeError):
        return f"input is not valid {e.encoding} (byte {e.start}); convert it to UTF-8"
    return f"text encoding error ({e})"


def describe(e: BaseException) -> tuple[str, int]:
    """The one-line message and exit code for ``e``."""
    if isinstance(e, AttnkitError):
        return str(e), e.exit_code
    if isinstance(e, MemoryError) or _allocation_failure(e):
        detail = str(e).split("\n")[0]
        return (
            f"out of memory{f' ({detail})' if detail else ''}; use a smaller model, "
            "batch (--batch-size, train.max_tokens), beam or input",
            1,
        )
    if isinstance(e, OSError):
        return _os_error(e), 1
    loop = _symlink_loop(e)
    if loop is not None:
        return f"{loop}: a symbolic link loop (too many levels of symbolic links)", 1
    if isinstance(e, UnicodeError):
        return _unicode(e), 1
    if isinstance(e, RecursionError):
        return "input nested too deeply to process (RecursionError)", 1
    if isinstance(e, OverflowError):
        return f"a number is too large ({e})", 1
    if type(e).__name__ == "SafetensorError":
        from attnkit.output_paths.policy import as_os_error

        os_error = as_os_error(e)
        reason = f" ({os_error.strerror})" if os_error is not None and os_error.strerror else ""
        return f"safetensors{reason}: {e}", 1
    return (
        f"unexpected {type(e).__name__}: {e}; rerun with --debug for the traceback "
        "and please report it",
        1,
    )


def _print(text: str) -> None:
    """Write one line to stderr even if it cannot encode it or has been closed."""
    stream = sys.stderr
    if stream is None:
        return
    try:
        try:
            stream.write(text + "\n")
        except UnicodeEncodeError:
            encoding = getattr(stream, "encoding", None) or "ascii"
            stream.write(text.encode(encoding, "backslashreplace").decode(encoding) + "\n")
        stream.flush()
    except (OSError, ValueError):  # stderr closed or a broken pipe: nowhere left to say it
        pass


def _silence_stdout() -> None:
    """Point fd 1 at /dev/null so the interpreter's last flush of stdout cannot fail."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


def _one_line_warning(command: str) -> Callable[..., str]:
    def format_warning(message: Warning | str, *args: object, **kwargs: object) -> str:
        return f"attnkit {command}: warning: {_one_line(str(message))}\n"

    return format_warning


def run_command(command: str, run: Callable[[], int | None], *, debug: bool) -> int:
    """Run ``attnkit COMMAND`` with the boundary around it; returns the exit code."""
    if sys.stdout is None:  # started with stdout closed (`>&-`): results would vanish
        _print(f"attnkit {command}: error: standard output is closed; redirect it to a file "
               "(or to /dev/null to discard it)")  # fmt: skip
        return 1
    previous = warnings.formatwarning
    if not debug:  # a warning is one line too, as errors are (--debug: Python's own form)
        warnings.formatwarning = _one_line_warning(command)
    try:
        return _run(command, run, debug=debug)
    finally:
        warnings.formatwarning = previous


def _run(command: str, run: Callable[[], int | None], *, debug: bool) -> int:
    try:
        code = int(run() or 0)
        if sys.stdout is not None:
            sys.stdout.flush()  # a broken pipe surfaces here, inside the boundary
        return code
    except KeyboardInterrupt:
        _print(f"attnkit {command}: interrupted")
        return 130
    except BrokenPipeError:
        if debug:
            raise
        _silence_stdout()  # the reader has gone: say nothing, like cat and grep
        return 1
    except Exception as e:
        if debug:
            raise
        message, code = describe(e)
        _print(f"attnkit {command}: error: {_one_line(message)}")
        return code
