"""A hang for a test to kill: a process whose ``TARRY_TEST_HANG_IN`` names a place writes the file
``TARRY_TEST_HANG_MARK`` names when it gets there, then blocks for good; the test waits for that file."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path


def hang_in(place: str) -> None:
    """Write the marker and block for good when this process was told to hang at ``place``."""
    if os.environ.get("TARRY_TEST_HANG_IN") == place:
        Path(os.environ["TARRY_TEST_HANG_MARK"]).write_text(str(os.getpid()))
        threading.Event().wait()


def hang_at(place: str, mark: Path) -> dict[str, str]:
    """The environment that makes a process hang at ``place``, writing ``mark`` when it gets there."""
    return {"TARRY_TEST_HANG_IN": place, "TARRY_TEST_HANG_MARK": str(mark)}


def kill_when_hung(process: subprocess.Popen[str], mark: Path, seconds: float = 60) -> None:
    """Poll until ``mark`` exists (failing if ``process`` ends first or ``seconds`` pass), then SIGKILL ``process``."""
    deadline = time.monotonic() + seconds
    try:
        while not mark.exists():
            assert process.poll() is None, process.communicate()[1]
            assert time.monotonic() < deadline, f"{mark.name} did not appear within {seconds:g} s"
            time.sleep(0.02)
    finally:
        process.send_signal(signal.SIGKILL)
        process.communicate(timeout=30)
    assert process.returncode == -signal.SIGKILL
