"""The notification tests' databases (the store tests' fixtures) and a webhook receiver in a process of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.store.conftest import database_url, postgres_url, store

__all__ = ["database_url", "postgres_url", "store"]

ROOT = Path(__file__).resolve().parents[2]
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
"""The webhook secret the tests sign with (base64, after the ``whsec_`` prefix)."""
NEWER_SECRET = "whsec_bmV3ZXIgc2VjcmV0IGZvciByb3RhdGlvbiE="


def environment() -> dict[str, str]:
    """The environment of a test's process: the tree's own code on the path."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}


@dataclass
class Receiver:
    """A webhook receiver running in its own process (``tests.notify.receiver``)."""

    folder: Path
    url: str
    process: subprocess.Popen[bytes]

    def received(self) -> list[dict[str, Any]]:
        """Every request it got so far, in order."""
        path = self.folder / "received"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]

    def answer(self, status: int, delay: float = 0.0) -> None:
        """Answer later requests with ``status``, after ``delay`` seconds."""
        (self.folder / "status.tmp").write_text(str(status))
        (self.folder / "status.tmp").rename(self.folder / "status")
        (self.folder / "delay.tmp").write_text(str(delay))
        (self.folder / "delay.tmp").rename(self.folder / "delay")

    def wait_for(self, count: int, seconds: float = 30) -> list[dict[str, Any]]:
        """The requests once there are at least ``count`` (fails after ``seconds``)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            got = self.received()
            if len(got) >= count:
                return got
            time.sleep(0.01)
        raise AssertionError(f"the receiver got {len(self.received())} webhooks, not {count}, within {seconds} s")


def start_receiver(folder: Path, *secrets: str) -> Receiver:
    """Start a receiver that verifies with each of ``secrets``; returns once it listens."""
    folder.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "tests.notify.receiver", str(folder), *secrets]
    process = subprocess.Popen(command, cwd=ROOT, env=environment())
    deadline = time.monotonic() + 30
    while not (folder / "port").exists():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise AssertionError("the webhook receiver did not start")
        time.sleep(0.01)
    return Receiver(folder, f"http://127.0.0.1:{(folder / 'port').read_text()}/hooks", process)


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[Receiver]:
    """A receiver verifying with ``SECRET``."""
    started = start_receiver(tmp_path / "receiver", SECRET)
    try:
        yield started
    finally:
        started.process.kill()
        started.process.wait()
