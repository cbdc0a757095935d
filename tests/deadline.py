"""Deadlines for tests: a program in a fresh Python process that must finish before one, a condition polled until one.

For checks whose failure is a hang that holds the GIL (a backtracking regex engine does): no thread of
the test process could time it out, a process of its own can be killed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def finishes(program: str, *, seconds: float = 60) -> str:
    """Run ``program`` with ``python -c`` from the repository's root; returns what it printed.

    Fails the test when it does not exit 0 within ``seconds`` (generous: a busy machine is slow, a hang is endless).
    """
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    try:
        done = subprocess.run(
            [sys.executable, "-c", program],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": path},
            capture_output=True,
            text=True,
            timeout=seconds,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise AssertionError(f"The program did not finish within {seconds:g} s:\n{program}") from None
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def poll_until(condition: Callable[[], bool], what: str, *, seconds: float = 60, every: float = 0.01) -> None:
    """Return once ``condition()`` holds, checking every ``every`` seconds; fail the test naming ``what`` when it
    does not within ``seconds`` (generous: a busy machine is slow)."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen within {seconds:g} s"
        time.sleep(every)
