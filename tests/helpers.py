"""Helpers for the tests: where the data is, and running a pipeline script the way a user does."""

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The first lines of WikiText-2 train and validation, shipped in the repository (tests/data/README.md).
WIKITEXT = REPO / "tests" / "data" / "wikitext-2"


def run_script(script, *args, expect_failure=False, env=None, timeout=600, prefix=()):
    """Runs `python script args...` from the repository in a fresh process; returns the CompletedProcess.

    Fails the test when the exit status is not the one expected, showing the script's output. `prefix` is a
    command that runs it, such as strace.
    """
    command = [*prefix, sys.executable, str(REPO / script), *map(str, args)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                            env={**os.environ, **(env or {})})
    failed = result.returncode != 0
    if failed != expect_failure:
        raise AssertionError(f"{' '.join(command)} exited with {result.returncode}\n"
                             f"--- stdout ---\n{result.stdout[-5000:]}\n--- stderr ---\n{result.stderr[-8000:]}")
    return result
