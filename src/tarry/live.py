"""What running tool code can do while its call runs: ask a person and wait for the decision; and what a model's
turn can do while it runs: record, once across processes, the runs of decided calls that the model's framework runs.

The chat sets ``current_call`` around every ``execute``/``resume``. Tool code that must
ask a question while it runs (an MCP server's push elicitation) calls
``current_call.get().ask(question)``: the chat records the question through its journal,
so any process lists and answers it, and the coroutine returns the recorded question once a
decision is recorded in any process, or when the question's time to live runs out.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

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


@dataclass(frozen=True)
class EarlierRun:
    """What the store recorded of an earlier run of a decided call's tool that another framework ran in a model turn.

    ``finished``: the run recorded its ``result`` (JSON); otherwise it was marked started and recorded nothing,
    so its process stopped while the tool ran (or before the result was saved): whether the tool finished is
    not known.
    """

    finished: bool
    result: Any = None


class LiveTurn:
    """The model turn that runs in this context, as a bridge's model sees it: the chat's id and the marks of the
    runs of the chat's closed calls whose tools the model's own framework runs (a bridged approval).

    ``start`` marks a call's run started in a transaction of its own, before its tool runs, and returns
    ``None``, or, when a run of that call was marked before (by any process), what it recorded, marking
    nothing; ``finish`` records the run's result (JSON).
    """

    def __init__(
        self,
        chat_id: str,
        start: Callable[[str], Awaitable[EarlierRun | None]],
        finish: Callable[[str, Any], Awaitable[None]],
    ) -> None:
        self.chat_id = chat_id
        """The id of the chat whose model runs."""
        self._start = start
        self._finish = finish

    async def start_run(self, call_id: str) -> EarlierRun | None:
        """Mark the run of call ``call_id``'s tool started: ``None`` when this did, else what an earlier run left."""
        return await self._start(call_id)

    async def finish_run(self, call_id: str, result: Any) -> None:
        """Record ``result`` (JSON) as what the run of call ``call_id``'s tool returned."""
        await self._finish(call_id, result)


current_turn: ContextVar[LiveTurn | None] = ContextVar("tarry_current_turn", default=None)
"""The model turn that runs in this context (while a model's ``complete`` runs), or ``None``."""
