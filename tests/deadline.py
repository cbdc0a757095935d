"""Running a program in a fresh Python process that must finish before a deadline.

For checks whose failure is a hang that holds the GIL (a backtracking regex engine does): no thread of
the test process could time it out, a process of its own can be killed.
"""

from __future__ import annotations

import os
import subprocess
import sys
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
