"""Processes whose clocks differ, racing for one call: ``python -m tests.store.skewed ROLE URL FOLDER SKEW``.

``SKEW`` seconds are added to what this process's system clock reads (negative: it runs behind), as a
host whose clock is off reads it: ``datetime.now`` in :mod:`tarry.clock`, the one place tarry reads the
time of day, is the stdlib's, shifted. The test's own clock offset (``tarry.clock.advance``) stays zero.

``first`` asks the chat's first question: its ``charge`` call runs for :data:`WORK` seconds (over two
renewals of the lease), writing ``started`` once it runs and ``done`` once the chat ends. ``second``
waits for ``started``, then completes the chat again and again until ``done``: a call whose lease it
judges run out, it takes over.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from datetime import datetime, timedelta, tzinfo
from pathlib import Path

import tarry.clock
from tarry import Tool
from tarry.store import Store
from tarry.testing import ScriptedModel

LEASE = 6.0
WORK = 5.0
"""Seconds the charge takes: with the first process behind by most of a lease, its claims looked run out to
the other for most of that time."""


def skew_clock(seconds: float) -> None:
    """Make this process's system clock read ``seconds`` off, for tarry."""

    class Skewed(datetime):
        @classmethod
        def now(cls, tz: tzinfo | None = None) -> Skewed:
            moment = datetime.now(tz) + timedelta(seconds=seconds)
            return cls.fromtimestamp(moment.timestamp(), tz)

    tarry.clock.datetime = Skewed  # type: ignore[misc]


class Charge(Tool):
    """Charges a card through a payment API that takes an idempotency key: safe to run again, never at once."""

    idempotent = True

    def __init__(self, folder: Path) -> None:
        super().__init__()
        self.folder = folder

    def execute(self, amount: int) -> str:
        with open(self.folder / "runs", "a") as runs:
            runs.write(f"{amount}\n")
        (self.folder / "started").touch()
        time.sleep(WORK)  # the charge's own work, not a wait for the other process
        return f"Charged {amount} EUR."


def model() -> ScriptedModel:
    def turn(messages: list) -> object:
        return [{"name": "charge", "arguments": {"amount": 30}}] if messages[-1].role == "user" else "Charged."

    return ScriptedModel([turn] * 50)


async def first(url: str, folder: Path) -> None:
    async with Store(url, lease=LEASE) as store:
        chat = await store.create_chat(model(), [Charge(folder)])
        (folder / "chat").write_text(chat.id)
        reply = await chat.ask("Charge 30 EUR")
        print(json.dumps({"reply": None if reply is None else reply.content}))
    (folder / "done").touch()


async def second(url: str, folder: Path) -> None:
    deadline = time.monotonic() + 120
    while not (folder / "started").exists():
        assert time.monotonic() < deadline, "the first process's charge never started"
        await asyncio.sleep(0.02)
    chat_id = (folder / "chat").read_text()
    async with Store(url, lease=LEASE) as store:
        while not (folder / "done").exists():
            assert time.monotonic() < deadline, "the first process never finished"
            chat = await store.load_chat(chat_id, model(), [Charge(folder)])
            await chat.complete()  # parks while the other process holds the call
            await asyncio.sleep(0.1)


if __name__ == "__main__":
    role, url, folder, skew = sys.argv[1:5]
    skew_clock(float(skew))
    asyncio.run({"first": first, "second": second}[role](url, Path(folder)))
