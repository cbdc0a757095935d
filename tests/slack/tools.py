"""Tools whose calls wait on Slack: a refund one person approves, a payout two must, and a booking form."""

from __future__ import annotations

from typing import Any

from tarry import Approval, Field, Task, Tool
from tarry.clock import utcnow
from tarry.notices import Delivery, NoticeEvent
from tarry.principals import Principal
from tarry.questions import Question
from tarry.store import Store
from tarry.testing import ScriptedModel

ADA = Principal("ada@example.com", "Ada Lovelace")
BOB = Principal("bob@example.com", "Bob Babbage")
PEOPLE = {("U0ADA", "T0TEAM"): ADA, ("U0BOB", "T0TEAM"): BOB}
"""Slack users (user id, team id) the tests' ``principal_for`` knows; anyone else is refused."""


def principal_for(slack_user_id: str, team_id: str | None) -> Principal | None:
    """The application's mapping of Slack users to tarry principals, as a test's application has it."""
    return PEOPLE.get((slack_user_id, team_id or ""))


class Refund(Tool):
    """Refunds an order; one person approves."""

    requires_approval = True

    def execute(self, order: str, amount: int) -> str:
        return f"Refunded {amount} on {order}."


class Payout(Tool):
    """Pays a supplier; two people approve."""

    requires_approval = Approval(count=2)

    def execute(self, supplier: str, amount: int) -> str:
        return f"Paid {amount} to {supplier}."


class Wire(Tool):
    """Wires money; only finance approves (the store's ``may_decide`` says who is finance)."""

    requires_approval = Approval(by="finance")

    def execute(self, to: str, amount: int) -> str:
        return f"Wired {amount} to {to}."


class Launch(Tool):
    """Launches; a person has one second to approve."""

    requires_approval = True
    approval_ttl = 1.0

    def execute(self, rocket: str) -> str:
        return f"Launched {rocket}."


class Book(Tool):
    """Books a table, asking for the details."""

    def execute(self, restaurant: str) -> Task:
        return self.ask(
            f"How should I book {restaurant}?",
            time=Field(choices={"19:00": "Seven", "20:00": "Eight"}, title="Time"),
            party=Field("integer", minimum=1, maximum=12, title="Party size"),
            terrace=Field("boolean", default=False, title="Terrace"),
            notes=Field(required=False, title="Notes"),
        )

    def resume(self, task: Task, restaurant: str) -> str:
        return f"Booked {restaurant}."


class Order(Tool):
    """Orders dishes, asking which (several may be picked) and where to send the receipt."""

    def execute(self, table: int) -> Task:
        return self.ask(
            f"What does table {table} want?",
            dishes=Field("array", choices={"pasta": "Pasta", "pizza": "Pizza", "salad": "Salad"}, max_length=2),
            receipt=Field(format="email", title="Receipt to"),
            spicy=Field("boolean", title="Spicy"),
        )

    def resume(self, task: Task, table: int) -> str:
        return "Ordered."


TOOLS = [Order(), Refund(), Payout(), Wire(), Launch(), Book()]


async def parked(store: Store, name: str, **arguments: Any) -> Question:
    """A new stored chat whose model calls ``name`` once; returns the question the call waits on."""
    chat = await store.create_chat(ScriptedModel([[{"name": name, "arguments": arguments}], "Done."]), TOOLS)
    await chat.ask("Please do it.")
    (question,) = await store.pending_questions(chat.id)
    return question


def delivery(question: Question, event: NoticeEvent, *, address: str | None = "U0ADA", number: int = 1) -> Delivery:
    """A delivery of ``event`` on ``question`` to Ada through Slack, as the delivery worker hands one over."""
    return Delivery(
        id=f"delivery-{question.id}-{event}-{number}",
        event=event,
        channel="slack",
        question=question,
        recipient=ADA,
        address=address,
        attempt=1,
        noticed_at=utcnow(),
    )
