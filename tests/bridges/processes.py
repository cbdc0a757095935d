"""The bridge tests' real OS processes: a command module of tests/bridges started on this checkout's tarry."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def start(module: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """``python -m MODULE ARGS`` in a real process, on this checkout's tarry, with ``env`` added to ours."""
    environment = {**os.environ, **(env or {}), "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    return subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=ROOT, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def finish(process: subprocess.Popen[str], timeout: float = 120) -> dict[str, object]:
    """What the process printed last, as JSON, once it exited 0 (its errors fail the test otherwise)."""
    out, err = process.communicate(timeout=timeout)
    assert process.returncode == 0, err
    printed: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    return printed
