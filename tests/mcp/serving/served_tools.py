"""The tools the MCP server tests serve, importable by the server processes they start."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from tarry import Agent, Task, Tool, tool
from tarry.tools import ask
from tests.store.tools import PickColour, mark


@tool
def add(a: int, b: int) -> str:
    """Adds two integers."""
    return str(a + b)


class BuildTask(Task):
    """A build's task: cancelling it leaves a marker, the proof that a cancellation reached the tool."""

    def cancel(self) -> Task:
        mark("cancel", str(self.data.get("release")))
        self.status = "cancelled"
        return self


class Build(Tool):
    """Starts a build that finishes when its release file exists.

    Checking on a build twice is harmless, so a check cut short by a dying process is run again.
    """

    task_class = BuildTask
    idempotent = True

    def execute(self, release: str) -> Task:
        mark("build", release)
        return BuildTask(status_message="building", poll_interval=0.1, data={"release": release})

    def resume(self, task: Task, release: str) -> str | Task:
        if Path(release).exists():
            return f"built {release}"
        return BuildTask(status_message="still building", poll_interval=0.1, data=task.data)


class Transfer(Tool):
    """Moves money; a person approves each transfer."""

    requires_approval = True

    def execute(self, amount: int, to: str) -> str:
        mark("transfer", f"{to}:{amount}")
        return f"Sent {amount} to {to}"


@tool
def echo(text: str) -> str:
    """Returns the text it is given."""
    return text


@tool
def fail() -> str:
    """Always fails."""
    raise RuntimeError("the disk is full")


class Survey(Tool):
    """Asks for a name and a go-ahead at once: two questions, answered in any order."""

    def execute(self) -> Task:
        name, go = replace(ask("Your name?", name=str), key="name"), replace(ask("Go ahead?", go=bool), key="go")
        return Task(status="input_required").with_question(name, go)


class SignUp(Tool):
    """Signs up for a plan once the person opened the terms page (a URL question)."""

    def execute(self, plan: str) -> Task:
        return self.ask("Read the terms before signing up", url="https://example.org/terms")

    def resume(self, task: Task, plan: str) -> str:
        mark("sign_up", plan)
        return f"signed up for {plan}"


TOOLS = [add, echo, PickColour(), Build(), Transfer(), fail, Survey(), SignUp()]


def worker_agents() -> list[Agent]:
    """What ``tarry worker --agents`` needs to carry the calls of ``tarry mcp serve --tools ...:TOOLS`` on."""
    from tarry.mcp_server import served_agent

    return [served_agent(TOOLS)]
