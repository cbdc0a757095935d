"""The test's side of :mod:`tests.store.machine_worker`: start, command, stop, kill and pause real store processes."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
_ids = itertools.count(1)


class Worker:
    """One ``machine_worker`` process: commands go in as JSON lines, replies are collected by a reader thread."""

    def __init__(self, url: str, lease: float, folder: Path, markers: Path, log: Path) -> None:
        path = os.pathsep.join(filter(None, [str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH")]))
        env = {**os.environ, "TARRY_TEST_MARKERS": str(markers), "PYTHONPATH": path}
        self.log = log
        with log.open("a") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.store.machine_worker", url, str(lease), str(folder)],
                cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True,
            )  # fmt: skip
        self.replies: dict[int, dict[str, Any]] = {}
        self.sent: dict[int, dict[str, Any]] = {}
        self._changed = threading.Condition()
        self._ended = False
        threading.Thread(target=self._read, daemon=True).start()

    @property
    def owner(self) -> str:
        """The name this process's store claims work under (once it has started)."""
        return str(self.wait(0, timeout=60)["owner"])

    def started_as(self) -> str | None:
        """The owner name, once the process has said it; ``None`` before."""
        hello = self.replies.get(0)
        return None if hello is None else str(hello["owner"])

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            reply = json.loads(line)
            with self._changed:
                self.replies[reply["id"]] = reply
                self._changed.notify_all()
        with self._changed:
            self._ended = True
            self._changed.notify_all()

    def send(self, op: str, **fields: Any) -> int:
        """Start a command in the process; returns its id."""
        number = next(_ids)
        self.sent[number] = {"op": op, **fields}
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(json.dumps({"id": number, "op": op, **fields}) + "\n")
            self.process.stdin.flush()
        except BrokenPipeError:
            raise AssertionError(self.died()) from None
        return number

    def died(self) -> str:
        """What to say when the process ended without being told to: its exit status and the end of its log."""
        self.process.wait(timeout=30)
        tail = self.log.read_text().strip().splitlines()[-5:]
        return f"worker {self.process.pid} exited with {self.process.returncode}: " + "\n".join(tail)

    def answered(self, number: int, timeout: float) -> bool:
        """Whether command ``number`` has its reply, waiting up to ``timeout`` seconds for it."""
        with self._changed:
            return self._changed.wait_for(lambda: number in self.replies or self._ended, timeout) and (
                number in self.replies
            )

    def wait(self, number: int, timeout: float) -> dict[str, Any]:
        """The reply to command ``number``; fails when none came in ``timeout`` seconds."""
        if not self.answered(number, timeout):
            raise AssertionError(
                self.died() if self._ended else f"worker {self.process.pid}: no reply to {self.sent.get(number)}"
            )
        return self.replies[number]

    def outstanding(self) -> list[int]:
        """Commands sent and not yet answered."""
        with self._changed:
            return [number for number in self.sent if number not in self.replies]

    def kill(self) -> None:
        """``kill -9``: whatever it was doing stops at once."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def pause(self) -> None:
        """``SIGSTOP``: the process holds its claims but renews none."""
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """``SIGCONT`` after :meth:`pause`."""
        self.process.send_signal(signal.SIGCONT)

    def stop(self, timeout: float = 60) -> None:
        """Close its input: it finishes what runs and exits."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise
