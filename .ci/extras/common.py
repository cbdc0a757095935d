"""What the extras' scripts share: a chat whose one call waits on a person's approval, and a few checks.

Each script runs in a virtual environment that holds tarry's wheel with one extra and nothing
else, so these helpers use tarry's core and the standard library only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tarry
from tarry import Agent, Message, Tool
from tarry.testing import ScriptedModel

DEADLINE = 120.0
"""Seconds a script waits for another process (generous: CI shares two cores)."""


class Refund(Tool):
    """Refunds an order. A person approves every refund."""

    requires_approval = True

    def execute(self, order: str) -> str:
        return f"Refunded order {order}."


def model() -> ScriptedModel:
    """A model whose turns depend on the transcript only: any process carries its chats on alike."""

    def turn(messages: list[Message]) -> Any:
        if messages[-1].role == "user":
            return [{"name": "refund", "arguments": {"order": "A17"}}]
        return f"Done: {messages[-1].content}"

    return ScriptedModel([turn] * 10)


refunds = Agent("refunds", model=model, tools=[Refund()])
"""The agent every script's chat is made from (a Celery worker imports it from here)."""

FINAL = "Done: Refunded order A17."
"""The chat's last message once the refund was approved and carried on."""


def from_the_wheel() -> None:
    """Fail unless tarry is the installed wheel of this environment, not a checkout's source."""
    where = Path(tarry.__file__).resolve()
    assert Path(sys.prefix).resolve() in where.parents, f"tarry imported from {where}, not from {sys.prefix}"


def tarry_command(*args: str, check: bool = True, **options: Any) -> subprocess.CompletedProcess[str]:
    """Run the environment's ``tarry`` console script (a real process) and return what it printed."""
    command = [str(Path(sys.executable).with_name("tarry")), *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=DEADLINE, check=False, **options)
    if check and done.returncode != 0:
        raise AssertionError(f"{' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done


def pending_ids(url: str) -> list[str]:
    """The ids of the questions that wait, as ``tarry pending --json`` lists them."""
    return [item["id"] for item in json.loads(tarry_command("pending", "--json", "--url", url).stdout)]


def until(check: Callable[[], Any], what: str) -> Any:
    """Poll ``check`` until it returns something true, or fail after :data:`DEADLINE` seconds."""
    deadline = time.monotonic() + DEADLINE
    while not (found := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.1)
    return found


def service_url(variable: str, default: str) -> str:
    """A service's URL from the variable .ci/run sets, else the local default."""
    return os.environ.get(variable) or default


def passed(extra: str, detail: str) -> None:
    """Say what the script showed."""
    print(f"{extra}: {detail}")
