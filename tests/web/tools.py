"""Tools whose calls wait in every way the inbox shows, and parking chats on them through the public API."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from tarry import Field, Question, Task, Tool
from tarry.store import Store
from tarry.testing import ScriptedModel

T = TypeVar("T")


def run(work: Callable[[], Awaitable[T]]) -> T:
    """Run ``work`` on an event loop of its own thread (Playwright's sync API keeps one in the main thread)."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = asyncio.run(work())  # type: ignore[arg-type]
        except BaseException as error:
            outcome["error"] = error

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(timeout=60)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]  # type: ignore[no-any-return]


XSS = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'


class Refund(Tool):
    """Refunds an order; a person approves every refund."""

    requires_approval = True

    def execute(self, order: str, amount: int, reason: str = "") -> str:
        return f"Refunded {amount} on {order}."


class BookTable(Tool):
    """Books a table, asking for the details with every kind of field."""

    def execute(self, restaurant: str) -> Task:
        return self.ask(
            f"How should I book {restaurant}?",
            time=Field(choices=["19:00", "20:00"], title="Time"),
            party=Field("integer", minimum=1, maximum=12, default=2, title="Party size"),
            email=Field(format="email", title="Email for the confirmation"),
            terrace=Field("boolean", default=False, title="Sit on the terrace"),
            dishes=Field(
                "array",
                choices={"pasta": "Pasta", "pizza": "Pizza", "salad": "Salad"},
                max_length=2,
                required=False,
                title="Dishes to pre-order",
            ),
            wine=Field(
                choices={"red": "Red", "white": "White", "rose": "Rosé", "sparkling": "Sparkling", "none": "No wine"},
                default="red",
                title="Wine",
            ),
            budget=Field("number", minimum=0, required=False, title="Budget per person"),
            notes=Field(required=False, description="Anything the restaurant should know.", title="Notes"),
        )

    def resume(self, task: Task, restaurant: str) -> str:
        return f"Booked {restaurant}."


class Confirm(Tool):
    """Asks a yes/no question that lapses after ``ttl`` seconds."""

    def execute(self, ttl: float) -> Task:
        return self.ask("Go ahead with the launch?", ok=Field("boolean", title="Go ahead"), ttl=ttl)

    def resume(self, task: Task, ttl: float) -> str:
        return "ok"


class Proceed(Tool):
    """Asks whether to go on, with nothing to fill in (as an MCP server asks its approvals)."""

    def execute(self, target: str) -> Task:
        return self.ask(f"Deploy to {target}?")

    def resume(self, task: Task, target: str) -> str:
        return "deployed"


class Visit(Tool):
    """Asks the person to visit a page."""

    def execute(self, url: str) -> Task:
        return self.ask("Sign in to the calendar so I can read it.", url=url)

    def resume(self, task: Task, url: str) -> str:
        return "visited"


class Link(Tool):
    """Asks to visit any URL at all, as an MCP server's URL elicitation can (``Tool.ask`` takes http(s) only)."""

    def execute(self, url: str) -> Task:
        asked = Question(id="", kind="url", message="Open this link to continue.", url=url)
        return Task("input_required").with_question(asked)

    def resume(self, task: Task, url: str) -> str:
        return "visited"


class Render(Tool):
    """Starts work that finishes later."""

    def execute(self, pages: int) -> Task:
        return Task(status_message=f"Rendering page 3 of {pages}", poll_interval=30)


class Busy(Tool):
    """Starts work that finishes later, saying whatever text it is given as its status."""

    def execute(self, text: str) -> Task:
        return Task(status_message=text, poll_interval=30)


class Shout(Tool):
    """Asks whatever text it is given, with choices titled by that text (for the XSS test)."""

    def execute(self, text: str) -> Task:
        return self.ask(text, pick=Field(choices={"a": text, "b": "plain"}, title=text))

    def resume(self, task: Task, text: str) -> str:
        return "shouted"


class Code(Tool):
    """Asks for a three-letter code (an ECMA-262 pattern) and a free text."""

    def execute(self, order: str) -> Task:
        return self.ask(f"Which code for {order}?", code=Field(pattern="^[a-z]{3}$"), remark=Field(required=False))

    def resume(self, task: Task, order: str) -> str:
        return "coded"


class Slug(Tool):
    """Asks for a slug whose pattern a backtracking engine takes exponential time over."""

    def execute(self, title: str) -> Task:
        return self.ask(f"Which slug for {title}?", slug=Field(pattern=r"^(\w+\s?)*$"))

    def resume(self, task: Task, title: str) -> str:
        return "slugged"


class Lookup(Tool):
    """Looks an order up at once; its result repeats the order (for the hostile payload tests)."""

    def execute(self, order: str) -> str:
        return f"Order {order} was paid twice."


TOOLS = [
    Refund(),
    BookTable(),
    Confirm(),
    Proceed(),
    Visit(),
    Link(),
    Render(),
    Busy(),
    Shout(),
    Code(),
    Slug(),
    Lookup(),
]


async def park_async(url: str, calls: Sequence[dict[str, Any]]) -> str:
    """A new stored chat whose model makes ``calls`` and which parks on them; returns its id."""
    async with Store(url) as store:
        await store.setup()
        chat = await store.create_chat(ScriptedModel([list(calls), "Done."]), TOOLS)
        await chat.ask("Please do it.")
        assert chat.waiting
        return chat.id


async def converse_async(url: str, says: str, order: str) -> str:
    """A stored chat: the user ``says``, the model looks ``order`` up, then asks to refund it; returns its id."""
    async with Store(url) as store:
        await store.setup()
        turns: list[Any] = [[call("lookup", order=order)], [call("refund", order=order, amount=5)], "Refunded."]
        chat = await store.create_chat(ScriptedModel(turns), TOOLS)
        await chat.ask(says)
        assert chat.waiting
        return chat.id


def converse(url: str, says: str, order: str) -> str:
    """:func:`converse_async` from synchronous code."""
    return run(lambda: converse_async(url, says, order))


def park(url: str, *calls: dict[str, Any]) -> str:
    """:func:`park_async` from synchronous code (its own event loop and store)."""
    return run(lambda: park_async(url, calls))


def setup(url: str) -> None:
    """Create the schema of the database at ``url``."""

    async def made() -> None:
        async with Store(url) as store:
            await store.setup()

    run(made)


def call(name: str, **arguments: Any) -> dict[str, Any]:
    """One scripted tool call."""
    return {"name": name, "arguments": arguments}


async def pending_async(url: str, chat_id: str | None = None) -> list[Any]:
    """The store's pending questions, read by a store of its own."""
    async with Store(url) as store:
        return await store.pending_questions(chat_id)


def pending(url: str, chat_id: str | None = None) -> list[Any]:
    """:func:`pending_async` from synchronous code."""
    return run(lambda: pending_async(url, chat_id))


def question(url: str, question_id: str) -> Any:
    """One question as the store holds it now."""

    async def read() -> Any:
        async with Store(url) as store:
            return await store.question(question_id)

    return run(read)
