"""Tools and models the store tests share with the processes they start."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

from tarry import Field, Message, Task, Tool
from tarry.live import current_call
from tarry.testing import ScriptedModel
from tarry.tools import ask


def mark(kind: str, call_id: str) -> None:
    """Append a line to the marker file named by TARRY_TEST_MARKERS: the proof that a tool ran."""
    path = os.environ.get("TARRY_TEST_MARKERS")
    if path:
        with open(path, "a") as markers:
            markers.write(f"{kind} {call_id}\n")


class TransferMoney(Tool):
    """Moves money between two accounts."""

    requires_approval = True

    def execute(self, amount: int, to: str) -> str:
        mark("transfer", f"{to}:{amount}")
        return f"Sent {amount} to {to}"


class LockedTransfer(TransferMoney):
    """Moves money; a person approves its calls as the model made them, or not at all."""

    editable = False


class PickColour(Tool):
    """Asks which colour to paint."""

    def execute(self, wall: str) -> Task:
        return self.ask("Which colour?", colour=Field(choices=["red", "blue"]), coats=Field("integer", default=1))

    def resume(self, task: Task, wall: str) -> str:
        assert task.answer is not None
        return f"{wall}: {task.answer['coats']} coat(s) of {task.answer['colour']}"


class SlowJob(Tool):
    """Starts a job that finishes on the second check."""

    def execute(self, job: str) -> Task:
        return Task(status_message="queued", poll_interval=0.1, data={"job": job, "checks": 0})

    def resume(self, task: Task, job: str) -> str | Task:
        checks = task.data["checks"] + 1
        if checks >= 2:
            return f"{job} finished after {checks} checks"
        return Task(status_message=f"checked {checks} time(s)", data={"job": job, "checks": checks})


class Hang(Tool):
    """Writes a ready file, then blocks until a release file appears (or forever)."""

    idempotent = False

    def execute(self, ready: str, release: str) -> str:
        mark("hang", ready)
        Path(ready).touch()
        event = threading.Event()
        while not Path(release).exists():
            event.wait(0.05)
        return "released"


class IdempotentHang(Hang):
    """Like Hang, but safe to run again."""

    idempotent = True


class BlockLoop(Tool):
    """Blocks the whole event loop (no lease renewal) on its first run until a release file appears."""

    idempotent = True

    async def execute(self, release: str) -> str:
        mark("block", release)
        runs = Path(os.environ["TARRY_TEST_MARKERS"]).read_text().count("block ")
        if runs > 1:
            return "second run"
        while not Path(release).exists():
            time.sleep(0.02)  # on purpose: starve the event loop, as a CPU-bound tool would
        return "first run"


class BookSeats(Tool):
    """Asks how many seats while it runs, then books them; safe to run again."""

    idempotent = True

    async def execute(self, restaurant: str) -> str:
        mark("book", restaurant)
        live = current_call.get()
        assert live is not None
        answered = await live.ask(ask(f"How many seats at {restaurant}?", seats=int))
        if answered.decision != "accept" or answered.answer is None:
            return "Not booked"
        return f"Booked {answered.answer['seats']} at {restaurant}"


def reactive_model(calls: list[dict[str, Any]], final: str = "All done.") -> ScriptedModel:
    """A model that makes ``calls`` after a user message and replies ``final`` once results are in.

    Its turns depend only on the transcript, so any process can carry a chat on with it.
    """

    def turn(messages: list[Message]) -> Any:
        mark("model", str(len(messages)))
        return calls if messages[-1].role == "user" else final

    return ScriptedModel([turn] * 50)


def all_tools() -> list[Tool]:
    """One of each tool."""
    return [TransferMoney(), PickColour(), SlowJob(), Hang(), IdempotentHang(), BlockLoop(), BookSeats()]
