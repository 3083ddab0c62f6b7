"""The output-path policy: every file or directory a command writes goes through here.

Principle 15 (every output path is owned). The rules, the same for every command:

* **Only regular files and directories are replaced.** A device (``/dev/null``),
  a FIFO, a socket, or a directory where a file is expected (and a file where
  a directory is expected) is refused before any work starts, naming the
  option and the path: replacing ``/dev/null`` with a regular file would break
  it for the whole machine.
* **Symbolic links are followed to what they name**, and that target is
  replaced atomically; the link itself is kept. A dangling link, a link loop
  or a link to something that is not a regular file (or directory) is refused.
* **Never an input.** An output that is one of the command's inputs
  (``evaluate --hyp-out`` naming ``--src``), a file inside an input directory
  (a checkpoint's ``model.safetensors``), anything inside an input model
  directory (``export --out CKPT/hf``; the command names its checkpoints:
  ``checkpoints=``), or a directory to be replaced that holds an input, is
  refused (compared with ``os.path.samefile`` and resolved paths, so ``./a``,
  ``a`` and a link to ``a`` are the same file). A checkpoint given as its run
  directory is the checkpoint it resolves to, so ``average --run R --out
  R/averaged`` writes beside the run's checkpoints, not inside one; a run may
  lie under its data directory.
* **Missing parent directories are created** (as ``mkdir -p`` would), but only
  when the output is written; before that the nearest existing ancestor must be a
  directory this process may write into, else the refusal names the path. On a
  read-only filesystem the check fails at once (``access(2)`` reports ``EROFS``
  even to root).
* **Atomic writes.** A file is written to a hidden temporary beside it
  (``.NAME.tmp-XXXX.SUFFIX``, same filesystem), fsynced and renamed over the
  target; a directory is staged the same way (``staged_directory``) and swapped
  in with two renames (``swap_directory``). On any error the temporary is
  removed and the target keeps what it held. A replaced file keeps its
  permission bits; a new one gets the usual ``0o666 & ~umask``.

Refusals are ``UsageError`` (exit 2); a failure while writing (a full disk,
``EROFS``, ``EACCES``) is ``OutputError`` (exit 1), naming the path and the
operating system's reason.
"""

from attnkit.errors import OutputError
from attnkit.output_paths.atomic import (
    atomic_file,
    check_replaceable_dir,
    fsync_dir,
    fsync_tree,
    make_temporary_dir,
    staged_directory,
    swap_directory,
    write_text,
)
from attnkit.output_paths.policy import (
    check_not_in_run_checkpoints,
    check_output_dir,
    check_output_file,
    describe_os_error,
)
from attnkit.output_paths.runlock import RunLock, RunLockedError, refuse_if_locked

__all__ = [
    "OutputError",
    "RunLock",
    "RunLockedError",
    "atomic_file",
    "check_not_in_run_checkpoints",
    "check_replaceable_dir",
    "check_output_dir",
    "check_output_file",
    "describe_os_error",
    "fsync_dir",
    "fsync_tree",
    "make_temporary_dir",
    "refuse_if_locked",
    "staged_directory",
    "swap_directory",
    "write_text",
]
