"""What running tool code can do while its call runs: ask a person and wait for the decision.

The chat sets ``current_call`` around every ``execute``/``resume``. Tool code that must
ask a question while it runs (an MCP server's push elicitation) calls
``current_call.get().ask(question)``: the chat records the question through its journal,
so any process lists and answers it, and the coroutine returns the recorded question once a
decision is recorded in any process, or when the question's time to live runs out.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar

from tarry.messages import ToolCall
from tarry.questions import Question


class LiveCall:
    """The tool call that runs in this context, as running tool code sees it."""

    def __init__(self, call: ToolCall, chat_id: str, asker: Callable[[Question], Awaitable[Question]]) -> None:
        self.call = call
        """The running call."""
        self.chat_id = chat_id
        """The id of the chat the call belongs to."""
        self._asker = asker

    async def ask(self, question: Question) -> Question:
        """Record ``question`` for this call, wait for its decision and return the recorded question.

        The returned question (not ``question``, a value left as it was) has its id and its times, and
        its ``decision`` is ``"accept"`` (with ``answer``), ``"decline"`` (with ``note``) or ``"cancel"``;
        it is ``None`` when the question's time to live ran out first (``expired(now)`` is then true).
        It is marked [`awaited`][tarry.Question.awaited], so a person may decline it while the call
        runs. When a process took the call over and runs its idempotent tool again, a question the same
        as the one the earlier run asked at that point returns that earlier question, with the answer a
        person gave it (or waits for it): a person answers once.
        """
        return await self._asker(question)


current_call: ContextVar[LiveCall | None] = ContextVar("tarry_current_call", default=None)
"""The call whose tool code runs in this context, or ``None`` outside tool code."""
