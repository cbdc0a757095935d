"""Agents and tools the jobs tests share with the processes they start (workers, Celery workers)."""

from __future__ import annotations

import asyncio
import os
import random
import time
from typing import Any

from tarry import Agent, Field, Message, Task, Tool, ToolCall
from tarry.testing import ScriptedModel


def mark(kind: str, what: str) -> None:
    """Append a line to the marker file named by TARRY_TEST_MARKERS: the proof that something ran."""
    path = os.environ.get("TARRY_TEST_MARKERS")
    if path:
        with open(path, "a") as markers:
            markers.write(f"{kind} {what} {time.time():.6f}\n")


class Transfer(Tool):
    """Moves money; a person approves every transfer. Not idempotent."""

    requires_approval = True

    def execute(self, to: str, amount: int) -> str:
        mark("transfer", to)
        return f"Sent {amount} to {to}"


class PickSize(Tool):
    """Asks a person which size to send."""

    def execute(self, order: str) -> Task:
        return self.ask("Which size?", size=Field(choices=["S", "M", "L"]))

    def resume(self, task: Task, order: str) -> str:
        assert task.answer is not None
        mark("size", f"{order}={task.answer['size']}")
        return f"{order}: size {task.answer['size']}"


class Quick(Tool):
    """Asks a yes/no question that lapses after ``ttl`` seconds."""

    def execute(self, ttl: float = 0.3) -> Task:
        return self.ask("Quick?", ttl=ttl, yes=Field("boolean"))


class Build(Tool):
    """Starts a build that finishes after a random time; checked every ``poll_interval`` (checking is idempotent)."""

    idempotent = True

    def execute(self, order: str, seconds: float, poll: float = 0.2) -> Task:
        mark("build-started", order)
        until = time.time() + seconds
        return Task(status_message="queued", poll_interval=poll, data={"until": until, "checks": 0})

    def resume(self, task: Task, order: str, seconds: float, poll: float = 0.2) -> str | Task:
        checks = task.data["checks"] + 1
        mark("build-check", order)
        if time.time() >= task.data["until"]:
            mark("build-done", order)
            return f"{order} built after {checks} checks"
        return Task(
            status_message=f"checked {checks} time(s)", poll_interval=poll, data={**task.data, "checks": checks}
        )


class Counted(Tool):
    """A task checked ``checks`` times before it finishes, every 0.05 s. Each check marks its start and its end with
    the process and the count it saw (``order:pid:seen``), so a test can tell whether two checks of one task ever ran
    at once, and whether a check's save was lost. Its fourth check takes ``slow`` seconds more. Checking is
    idempotent."""

    idempotent = True

    def execute(self, order: str, checks: int, slow: float = 0.0) -> Task:
        return Task(status_message="counting", poll_interval=0.05, data={"seen": 0})

    def resume(self, task: Task, order: str, checks: int, slow: float = 0.0) -> str | Task:
        seen = task.data["seen"]
        what = f"{order}:{os.getpid()}:{seen}"
        mark("count-start", what)
        # A check takes a while (a kill may come in the middle of one); one may outlast the lease.
        time.sleep(random.uniform(0, 0.02) + (slow if seen == 3 else 0.0))
        mark("count-end", what)
        if seen + 1 >= checks:
            return f"{order} checked {checks} times"
        return Task(status_message=f"seen {seen + 1}", poll_interval=0.05, data={"seen": seen + 1})


class Cancellable(Task):
    """A task whose ``cancel()`` leaves a marker, as an MCP task sends ``tasks/cancel``."""

    async def cancel(self) -> Task:
        order = self.data.get("order", "?")
        mark("task-cancelled", order)
        self.status = "cancelled"
        return self


class LongWork(Tool):
    """Starts work that never finishes by itself; its task can be cancelled."""

    task_class = Cancellable

    def execute(self, order: str) -> Task:
        return Cancellable(status_message="working", poll_interval=0.2, data={"order": order, "checks": 0})

    def resume(self, task: Task, order: str) -> Task:
        checks = task.data["checks"] + 1
        mark("long-check", order)
        return Cancellable(
            status_message=f"step {checks} of 100", poll_interval=0.2, data={"order": order, "checks": checks}
        )


class Stall(Tool):
    """Runs until released: writes ``started`` then waits, checking for the ``release`` file (or cancellation)."""

    def requires_approval(self, call: ToolCall) -> bool:  # type: ignore[override]
        return bool(call.arguments.get("approve"))

    async def execute(self, started: str, release: str, seconds: float = 60.0, approve: bool = False) -> str:
        mark("stall", started)
        with open(started, "w"):
            pass
        deadline = time.monotonic() + seconds
        while not os.path.exists(release) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        mark("stall-done", started)
        return "released"


def order_calls(order: str, seconds: float, poll: float = 0.2) -> list[dict[str, Any]]:
    """The three calls of one order: an approval, a question and a task."""
    return [
        {"name": "transfer", "arguments": {"to": order, "amount": 5}},
        {"name": "pick_size", "arguments": {"order": order}},
        {"name": "build", "arguments": {"order": order, "seconds": seconds, "poll": poll}},
    ]


def clerk_model() -> ScriptedModel:
    """A model whose turn depends only on the transcript: the user's text is a JSON list of calls."""
    import json

    def turn(messages: list[Message]) -> Any:
        last = messages[-1]
        mark("model", str(len(messages)))
        if last.role == "user":
            return json.loads(last.content)
        results = [message for message in messages if message.role == "tool"]
        return f"Done after {len(results)} results."

    return ScriptedModel([turn] * 20)


def clerk() -> Agent:
    """The agent of the jobs tests."""
    return Agent(
        "clerk",
        model=clerk_model,
        tools=[Transfer(), PickSize(), Build(), LongWork(), Stall(), Counted()],
        instructions="You are a shop clerk.",
    )


def random_orders(count: int, seed: int, longest: float) -> list[tuple[str, float]]:
    """``count`` orders with random build times up to ``longest`` seconds."""
    chance = random.Random(seed)
    return [(f"order{number}", round(chance.uniform(0.1, longest), 3)) for number in range(count)]
