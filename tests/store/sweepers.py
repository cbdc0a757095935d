"""What the follow-up tests share with the sweeping processes they start.

``python -m tests.store.sweepers URL SECONDS START_FILE`` moves its clock ``SECONDS`` ahead, waits for ``START_FILE``,
sweeps the approval policies' follow-ups until none is due, and prints the ids of the questions it reminded (JSON).
"""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import timedelta
from pathlib import Path

from tarry import Agent, Task, Tool
from tarry.approvals import Approval
from tarry.store import Store
from tarry.testing import advance_clock
from tests.store.tools import mark, reactive_model

REMIND, ESCALATE, TTL = 60, 120, 300
"""When a refund's approval is reminded and escalated, and how long it stays open (seconds)."""


class Refund(Tool):
    """Refunds a customer's payment."""

    requires_approval = Approval(
        by="finance",
        remind_after=timedelta(seconds=REMIND),
        escalate_after=timedelta(seconds=ESCALATE),
        escalate_to=("boss",),
    )
    approval_ttl = TTL

    def execute(self, amount: int, to: str) -> str:
        mark("refund", f"{to}:{amount}")
        return f"Refunded {amount} to {to}"


class StrictRefund(Refund):
    """Refunds a customer's payment; declined when nobody decides in time."""

    requires_approval = Approval(by="finance", remind_after=REMIND, on_timeout="decline")


FORM_POLICY = Approval(by="finance", remind_after=REMIND, escalate_after=ESCALATE, escalate_to=("boss",))
"""A tool's question's policy: finance answers, reminded and escalated as the refund's approval is."""


class Booking(Tool):
    """Books a table, asking a person which time."""

    def execute(self, restaurant: str) -> Task:
        return self.ask(f"Which time at {restaurant}?", time=str, ttl=TTL, policy=FORM_POLICY)

    def resume(self, task: Task, restaurant: str) -> str:
        assert task.answer is not None
        mark("booking", f"{restaurant}:{task.answer['time']}")
        return f"Booked {restaurant} at {task.answer['time']}"


class StrictBooking(Booking):
    """Books a table; its question is declined when nobody answers in time."""

    def execute(self, restaurant: str) -> Task:
        strict = Approval(by="finance", remind_after=REMIND, on_timeout="decline")
        return self.ask(f"Which time at {restaurant}?", time=str, ttl=TTL, policy=strict)


def refunds() -> Agent:
    """The agent whose refunds are declined when nobody decides in time (``StrictRefund``)."""
    calls = [{"name": "strict_refund", "arguments": {"to": "Carol", "amount": 40}}]
    return Agent("refunds", model=lambda: reactive_model(calls), tools=[StrictRefund()])


async def sweep(url: str, seconds: str, start_file: str) -> None:
    """Sweep once the start file appears, with the clock moved; print the ids of the questions reminded."""
    advance_clock(float(seconds))
    reminded: list[str] = []
    async with Store(url) as store:
        await store.pending_questions()  # open the pool before the start signal
        while not Path(start_file).exists():
            await asyncio.sleep(0.01)
        while done := await store.sweep_reminders(limit=3):
            reminded += [item.question.id for item in done if item.what == "remind"]
    print(json.dumps(reminded))


if __name__ == "__main__":
    asyncio.run(sweep(*sys.argv[1:]))
