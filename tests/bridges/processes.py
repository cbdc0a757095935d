"""The bridge tests' real OS processes: a command module of tests/bridges started on this checkout's tarry, and racers
started together."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from tests.deadline import poll_until

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


async def at_the_start_line(start_file: str) -> None:
    """In a racer: say it is ready (a file ``START_FILE.ready.PID``), then wait until ``start_file`` exists."""
    Path(f"{start_file}.ready.{os.getpid()}").touch()
    while not Path(start_file).exists():
        await asyncio.sleep(0.005)


def start_together(go: Path, racers: Sequence[subprocess.Popen[str]]) -> None:
    """Create ``go`` once every racer said it is ready ([`at_the_start_line`]); fail when one exits before."""

    def all_ready() -> bool:
        for racer in racers:
            assert racer.poll() is None, f"a racer exited before the start: {racer.communicate()[1]}"
        return len(list(go.parent.glob(f"{go.name}.ready.*"))) == len(racers)

    poll_until(all_ready, f"{len(racers)} racers getting ready")
    go.touch()
