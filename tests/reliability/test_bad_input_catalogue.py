"""A catalogue of bad inputs, each run through the real CLI in a child process.

One row per case: what is broken, the command, the exit code (2: usage or
config, 1: data or checkpoint at run time) and two substrings of the error:
*where* (the file, line or field at fault) and *hint* (what to do). For every
row the test checks that

* the process exits with that code and prints nothing on standard output;
* standard error is exactly one line, without a traceback, holding both substrings;
* nothing on disk changed: no file created, removed, rewritten or touched
  (the shared training run, the data and the test's own directory are
  snapshotted before and compared after).

The rows live by theme, each file with its own
``test_bad_input_gives_one_line_and_changes_nothing``:

* ``test_bad_data_and_configs.py``: data files and run configs;
* ``test_bad_arguments_and_checkpoints.py``: command-line arguments and checkpoints;
* ``test_bad_output_paths.py``: output paths (the output-path policy).

The machinery (``Case``, ``Ctx``, the ways to break a file, ``check``) is in
``catalogue_helpers.py``.
"""

from __future__ import annotations

from test_bad_arguments_and_checkpoints import CASES as ARGUMENTS_AND_CHECKPOINTS
from test_bad_data_and_configs import CASES as DATA_AND_CONFIGS
from test_bad_output_paths import CASES as OUTPUT_PATHS


def test_the_catalogue_has_at_least_75_cases():
    cases = [*DATA_AND_CONFIGS, *ARGUMENTS_AND_CHECKPOINTS, *OUTPUT_PATHS]
    assert len(cases) >= 75
    assert len({case.id for case in cases}) == len(cases)
