"""One run of a call's tool, and replaying a reclaimed run: the process that took a call over runs its tool again,
and each question the stopped run asked, asked again in the same order, is that run's question, not a new one."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tarry.calls import CallRecord, mint
from tarry.clock import utcnow
from tarry.journal import Journal
from tarry.questions import Question

RAN_AGAIN = "The run of the tool that asked this stopped; the run that took the call over did not ask it again."
"""The note of a question cancelled because no run of its call will read the answer."""


class ToolRun:
    """One run of the tool of ``record``'s call, which asks its questions while it runs through ``ask``.

    ``repeats`` are what the run it repeats asked and this one has not asked again yet, in order
    (see ``asked_by_the_last_run``); empty for a first run.
    """

    def __init__(self, journal: Journal, chat_id: str, record: CallRecord, repeats: list[Question]) -> None:
        self.journal = journal
        self.chat_id = chat_id
        self.record = record
        self.repeats = repeats
        self.last_asked: str | None = None
        """The id of the question this run asked last."""

    @classmethod
    def of(cls, journal: Journal, chat_id: str, record: CallRecord, *, reclaimed: bool) -> ToolRun:
        """The next run of ``record``'s tool: one that repeats the stopped run when the call was ``reclaimed``."""
        return cls(journal, chat_id, record, asked_by_the_last_run(record) if reclaimed else [])

    async def ask(self, question: Question) -> Question:
        """Record ``question`` for the running call, wait for its decision and return the recorded question.

        While this run asks the same questions in the same order as the run it repeats, each is the earlier
        run's: the earlier question (its id, its answer) is returned, so an answer a person gave it is not asked
        for twice, and one still to come reaches this run. ``question`` itself is left as it was.
        """
        record = self.record
        earlier = self.repeats.pop(0) if self.repeats else None
        if earlier is not None and _asks_the_same(earlier, question) and not earlier.expired(utcnow()):
            asked = earlier
        else:
            # It asks something else: what the earlier run asked from here on is not this run's, and nothing waits
            # for its answers.
            unused = [earlier, *self.repeats] if earlier is not None else []
            self.repeats.clear()
            await self.close_unused(unused)
            asked = mint(replace(question, awaited=True, after=self.last_asked), record.call, self.chat_id)
            await self.journal.add_question(record.call.id, len(record.questions), asked)
            record.questions.append(asked)
        self.last_asked = asked.id
        if asked.decision is None:
            asked = record.take(await self.journal.wait_for_decision(asked))
        return asked

    async def start_over(self) -> None:
        """Before a reclaimed run: when it repeats nothing, cancel every question the stopped runs asked."""
        if not self.repeats:
            await self.close_unused([question for question in self.record.questions if question.awaited])

    async def finish(self) -> None:
        """After the run: cancel what the run it repeats asked and this one did not ask again."""
        if self.repeats:
            await self.close_unused(self.repeats)

    async def close_unused(self, questions: list[Question]) -> None:
        """Cancel, through the ``code`` channel, those of ``questions`` still open: asked by a run of the call's
        tool that stopped, and not asked again by this run, they are answered by nobody.

        A person's answer that comes first is kept (and unused). Raises
        [`ClaimLostError`][tarry.errors.ClaimLostError] once this process no longer holds the call,
        cancelling nothing.
        """
        now = utcnow()
        unused = [question for question in questions if question.is_open(now)]
        if not unused:
            return
        call_id = self.record.call.id
        closed = {question.id: question for question in await self.journal.close_unused(call_id, unused, RAN_AGAIN)}
        for question in unused:
            if question.id in closed:
                self.record.take(closed[question.id])


def asked_by_the_last_run(record: CallRecord) -> list[Question]:
    """What the call's last run asked while it ran, in order, when it ran ``execute`` and no run recorded a pause
    (each earlier run was then cut short, and the last one asked the last question); otherwise nothing.

    Each question a run asks anew names the one the run asked before it ([`after`][tarry.Question.after]).
    """
    asked = {question.id: question for question in record.questions if question.awaited}
    if record.task is not None or not asked:
        return []
    chain = [list(asked.values())[-1]]
    while (before := asked.get(chain[-1].after or "")) is not None and before not in chain:
        chain.append(before)
    return chain[::-1]


def _asks_the_same(earlier: Question, question: Question) -> bool:
    """Whether ``question`` asks what ``earlier`` asked: the same kind, words, fields and asker. Never a page to
    visit: what a visit completes is the request that named it (an MCP server's elicitation id)."""

    def asked(one: Question) -> tuple[Any, ...]:
        return one.kind, one.message, one.requested_schema if one.fields else None, one.source

    return question.kind != "url" and asked(earlier) == asked(question)
