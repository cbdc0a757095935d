"""Carrying calls on: each call that can go on runs its tool (or resumes its task), or closes, under its claim."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Sequence
from contextlib import asynccontextmanager
from typing import Any

from tarry import planning
from tarry.approvals import Approval
from tarry.calls import CallRecord, CallState, Claim, Outcome, Standing, call_state, mint
from tarry.clock import utcnow
from tarry.edits import as_ran, asks_more, with_note
from tarry.errors import ClaimLostError, InvalidArgumentsError, MissingToolsError, ToolCallError
from tarry.journal import Journal
from tarry.live import LiveCall, current_call
from tarry.messages import Message, ToolCall, result_text
from tarry.planning import Plan, Step
from tarry.questions import Question
from tarry.replay import ToolRun
from tarry.tasks import Task
from tarry.tools import Tool, call_maybe_async, settle
from tarry.tracing import mark, span, span_ids

logger = logging.getLogger("tarry")
CallStep = Callable[[], Awaitable[Outcome]]
"""What carries a call on: runs its tool, or closes it with an error result."""
Look = Callable[[], Awaitable[object]]
"""Takes in what other processes recorded."""


class CallCarrier:
    """Carries on the calls of one chat: its ``records``, its transcript (``messages``, which each result joins)
    and its ``tools``, writing through its ``journal``; ``max_concurrency`` calls at once.

    One carrier serves one run of the chat loop: it remembers which calls' tool code already ran
    in it (``resumed``), so a task that still waits is not checked twice. ``claims_turn``: the chat
    has a model, so the result of its last open call claims the model's turn in the same write.
    """

    def __init__(
        self,
        chat_id: str,
        journal: Journal,
        records: dict[str, CallRecord],
        messages: list[Message],
        tools: dict[str, Tool],
        *,
        max_concurrency: int,
        claims_turn: bool,
    ) -> None:
        self.chat_id = chat_id
        self.journal = journal
        self.records = records
        self.messages = messages
        self.tools = tools
        self.max_concurrency = max_concurrency
        self.claims_turn = claims_turn
        self.resumed: set[str] = set()
        """The ids of the calls whose tool code ran in this carrier's run."""

    # What can go on

    def standing(self, record: CallRecord) -> Standing:
        """Where ``record``'s call stands now, for this run."""
        return call_state(record, utcnow(), checked=record.call.id in self.resumed)

    def plan(self) -> Plan:
        """The plan for the chat's calls as it holds them now, in this run."""
        return planning.plan(self.records.values(), self.tools, utcnow(), ran=self.resumed)

    def refuse_missing_tools(self, missing: Sequence[str]) -> None:
        """Refuse to go on while a call that paused (so its tool was known) would now run a tool this chat lacks
        (``missing``, as planned).

        Carrying it on would close it as an unknown tool and use up its approval or answer. A call
        that still waits, or that closes without its tool (declined, lapsed), is no reason to refuse.
        """
        if missing:
            names = ", ".join(missing)
            raise MissingToolsError(
                f"Calls of chat {self.chat_id} wait on tools this chat was not given: {names}. "
                "Load the chat with those tools (tools=[...]) to carry it on, or cancel it.",
                list(missing),
            )

    # Carrying on

    async def carry_all(self, look: Look) -> None:
        """Carry every call on that can go on, until none can.

        Each round plans from the chat's view of its calls, then carries the plan out. A plan that claims
        calls needs no look first: each claim tells whether the view it was made from still holds. A view
        that proved stale (a claim found its call or the chat changed, or lost the call) meets one rule:
        look at the journal again, then plan again. A plan that claims nothing (every call waits, or a
        tool lacks) is carried out only on a view just looked at. A call another process runs (busy) is
        that process's to carry on.
        """
        looked = False
        while True:
            planned = self.plan()
            if not planned.claims and not looked:
                await look()
                looked = True
                continue
            self.refuse_missing_tools(planned.missing)
            if not await self.carry_steps(planned.steps):
                return
            await look()  # another process took a call over, or changed the chat: look at what it recorded
            looked = True

    async def carry_steps(self, steps: Sequence[Step]) -> bool:
        """Carry on the calls of ``steps``, a bounded number at once; whether a claim was lost (or found stale)."""
        limit = asyncio.Semaphore(self.max_concurrency)
        lost = False

        async def carry(step: Step) -> None:
            nonlocal lost
            async with limit:
                lost = not await self.carry(step.record) or lost

        # Not a TaskGroup: one carry failing (a database error) must not cancel the others mid-tool.
        outcomes = await asyncio.gather(*(carry(step) for step in steps), return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        return lost

    async def carry(self, record: CallRecord) -> bool:
        """Do what carries ``record`` on, under its claim; False when the claim was lost or the call was stale."""
        async with self.hold(record) as claim:
            if claim is Claim.STALE:
                return False
            standing = self.standing(record)
            run = ToolRun.of(self.journal, self.chat_id, record, reclaimed=claim is Claim.RECLAIMED)
            step = None if claim is Claim.BUSY else self.next_step(record, standing, run)
            if step is None:
                return True
            self._log_claim(record, claim)
            outcome = await self._outcome(record, standing, claim, step, run)
            return outcome is not None and await self._record(record, outcome)

    async def _outcome(
        self, record: CallRecord, standing: Standing, claim: Claim, step: CallStep, run: ToolRun
    ) -> Outcome | None:
        """What taking ``step`` came to; ``None`` when the claim was lost while the tool ran, or when the call, as a
        person changed it, was asked again for the approval its policy needs."""
        runs_tool = standing.state is CallState.RUNS
        reclaimed = claim is Claim.RECLAIMED
        if runs_tool and reclaimed and not self._idempotent(record):
            return self._interrupted(record)
        if runs_tool:
            self.resumed.add(record.call.id)
        name, call_id, ids = record.call.name, record.call.id, self._ids(record)
        attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, **span_ids(ids)}
        checking = runs_tool and record.task is not None
        with span(f"execute_tool {name}", {**attributes, "gen_ai.tool.call.id": call_id}):
            try:
                if runs_tool and reclaimed:
                    await run.start_over()
                outcome = await step()
                await run.finish()
            except _AskedAgain:  # the call as changed waits on another approval now: nothing ran, nothing to save
                # Its tool did not run: once that approval is decided (a standing grant may decide it at once), the
                # call runs in this round.
                self.resumed.discard(call_id)
                return None
            except ClaimLostError:  # the tool asked a question after another process took its call over
                logger.warning(
                    "Lost the claim on the %s call %s while it ran; another process carries it on",
                    name,
                    call_id,
                    extra=ids,
                )
                return None
        self._trace_outcome(record, outcome, checking)
        return outcome

    def _idempotent(self, record: CallRecord) -> bool:
        tool = self.tools.get(record.call.name)
        return tool is not None and tool.idempotent

    def _interrupted(self, record: CallRecord) -> Outcome:
        """The result of a call whose tool may have run in a process that stopped before it recorded a result."""
        name, call_id = record.call.name, record.call.id
        logger.warning("Closed the %s call %s as interrupted", name, call_id, extra=self._ids(record))
        return Outcome(result=error_result(record.call, interrupted_message(name)))

    async def _record(self, record: CallRecord, outcome: Outcome) -> bool:
        """Save ``outcome``; False when the claim was lost meanwhile."""
        # The result of the last open call makes the model next: claim its turn in the same write.
        last = outcome.result is not None and not any(
            other.open for other in self.records.values() if other is not record
        )
        try:
            await self.save(record, outcome, claim_turn=last and self.claims_turn)
        except ClaimLostError:
            name, call_id, ids = record.call.name, record.call.id, self._ids(record)
            logger.warning("Lost the claim on the %s call %s; another process carries it on", name, call_id, extra=ids)
            return False
        return True

    def _ids(self, record: CallRecord) -> dict[str, str]:
        return {"chat_id": self.chat_id, "call_id": record.call.id}

    def _log_claim(self, record: CallRecord, claim: Claim) -> None:
        name, call_id, ids = record.call.name, record.call.id, self._ids(record)
        if claim is Claim.RECLAIMED:
            logger.warning(
                "Reclaimed the %s call %s: the lease of the process running it ran out", name, call_id, extra=ids
            )
        else:
            logger.debug("Claimed the %s call %s", name, call_id, extra=ids)

    def _trace_outcome(self, record: CallRecord, outcome: Outcome, checking: bool) -> None:
        """Mark a pause on the trace, and log what checking a paused task found."""
        name, call_id, ids = record.call.name, record.call.id, self._ids(record)
        if outcome.task is not None:
            paused: dict[str, str | int] = {
                "tarry.pause.reason": "question" if outcome.task.questions else "task",
                "tarry.task.status": str(outcome.task.status),
                "tarry.questions": len(outcome.questions),
            }
            mark(f"pause {name}", {"gen_ai.tool.name": name, **span_ids(ids), **paused})
        if checking:
            state = "finished" if outcome.result is not None else "still waits"
            logger.info("Checked the task of the %s call %s: it %s", name, call_id, state, extra=ids)

    @asynccontextmanager
    async def hold(self, record: CallRecord) -> AsyncIterator[Claim]:
        """Claim ``record``'s call through the journal for the block, marking the record as running meanwhile."""
        async with self.journal.hold_call(record.call.id) as claim:
            if not claim.held:
                yield claim
                return
            record.running = True
            try:
                yield claim
            finally:
                record.running = False

    async def save(self, record: CallRecord, outcome: Outcome, *, claim_turn: bool = False) -> None:
        """Record ``outcome`` through the journal, then take it onto ``record`` (a result joins the transcript)."""
        first = len(record.questions)
        await self.journal.save_call(record.call.id, outcome, first_question=first, claim_turn=claim_turn)
        # A refresh that ran meanwhile (a stored chat read by another coroutine) may already hold the change.
        if outcome.result is not None:
            if record.result is None:
                self.messages.append(outcome.result)
            record.result = outcome.result
        else:
            record.task = outcome.task
            known = {question.id for question in record.questions}
            record.questions.extend(question for question in outcome.questions if question.id not in known)

    # The steps

    def next_step(self, record: CallRecord, standing: Standing, run: ToolRun) -> CallStep | None:
        """What carries ``record`` on from where it stands (as ``run``), or ``None`` while it waits (or is closed)."""
        if standing.state is CallState.CLOSES:
            return closing(record.call, standing)
        if standing.state is not CallState.RUNS:
            return None
        task = record.task
        if task is None:
            return lambda: self._execute(record, run)
        return lambda: self._resume(record, task, run)

    async def _execute(self, record: CallRecord, run: ToolRun) -> Outcome:
        call = as_ran(record)  # with a person's changes, if they made any
        tool = self.tools.get(call.name)
        if tool is None:
            available = ", ".join(self.tools) or "none"
            return Outcome(result=error_result(call, f"Unknown tool {call.name!r}. Available tools: {available}."))
        asked = self._asks_more(record, tool, call)
        if asked is not None:
            await self._ask_again(record, tool, call, asked)
            raise _AskedAgain
        try:
            arguments = tool.validate(call.arguments)
        except InvalidArgumentsError as error:
            return Outcome(result=with_note(error_result(call, str(error)), record))
        return _told(await self._invoke(record, run, tool.execute, arguments), record)

    def _asks_more(self, record: CallRecord, tool: Tool, call: ToolCall) -> Approval | None:
        """The approval ``call``, as a person changed it, needs when its tool's policy asks more of it than its
        approval met (more people, or another group); ``None`` when it asks no more (or nobody changed the call)."""
        approval = record.approval
        if approval is None or call is record.call:
            return None
        try:
            asked = tool.approval_policy(call)
        except Exception:  # as for the call the model made: one person's approval, which it had
            logger.exception("The approval rule of %s raised on changed arguments", call.name)
            return None
        return asked if asks_more(asked, approval.policy) else None

    async def _ask_again(self, record: CallRecord, tool: Tool, call: ToolCall, policy: Approval) -> None:
        """Ask for the approval ``policy`` of ``call``, ``record``'s call as a person changed it: a new approval
        question of the same call, proposing the changed arguments, which the call waits on now."""
        approval = record.approval
        assert approval is not None
        asked = Question(
            id="",
            kind="approval",
            message=f"Approve the {call.name} call as a person changed it?",
            ttl=tool.approval_ttl,
            policy=None if policy == Approval() else policy,
            editable=approval.editable,
            changed_arguments=dict(call.arguments),
        )
        again = mint(asked, record.call, self.chat_id)
        await self.journal.add_question(record.call.id, len(record.questions), again)
        record.questions.append(again)
        logger.info(
            "The %s call as changed needs another approval (%s people%s); asked again",
            call.name,
            policy.count,
            f", allowed as {policy.by!r}" if policy.by else "",
            extra=self._ids(record),
        )

    async def _resume(self, record: CallRecord, task: Task, run: ToolRun) -> Outcome:
        own = [question for question in task.questions if question.source is None]
        if own:
            task.answer = own[0].answer
        tool = self.tools.get(record.call.name)
        if tool is None:
            return Outcome(result=error_result(record.call, f"The {record.call.name} tool is no longer available."))
        try:
            arguments = tool.validate(as_ran(record).arguments)
        except InvalidArgumentsError as error:  # the tool's parameters changed since the call was made
            return Outcome(result=with_note(error_result(record.call, str(error)), record))
        return _told(await self._invoke(record, run, tool.resume, arguments, task), record)

    async def _invoke(
        self,
        record: CallRecord,
        run: ToolRun,
        method: Callable[..., Any],
        arguments: dict[str, Any],
        *args: Any,
    ) -> Outcome:
        live = current_call.set(LiveCall(record.call, self.chat_id, run.ask))
        try:
            known = {question.id for question in record.questions}
            return await run_outcome(record.call, self.chat_id, call_maybe_async(method, *args, **arguments), known)
        finally:
            current_call.reset(live)

    # Cancelling

    async def cancel_open(self, cancel: Callable[[Question], Awaitable[object]]) -> bool:
        """Cancel every open call's task and close the call with a cancelled result, cancelling its open
        questions through ``cancel``; True when a call had changed meanwhile and should be looked at again."""
        stale = False
        for record in [record for record in self.records.values() if record.open]:
            async with self.hold(record) as claim:
                stale = stale or claim is Claim.STALE
                if claim.held and record.open:
                    await self._cancel(record, cancel)
        return stale

    async def _cancel(self, record: CallRecord, cancel: Callable[[Question], Awaitable[object]]) -> None:
        if record.task is not None:
            try:
                await settle(record.task.cancel())
            except Exception:
                logger.exception("Cancelling the task of the %s call failed", record.call.name)
        # A call already declined (or lapsed) keeps that result, so a decline note still reaches the model.
        standing = self.standing(record)
        if standing.state is CallState.CLOSES:
            await self.save(record, await closing(record.call, standing)())
            return
        for question in record.pending_questions(utcnow()):
            await cancel(question)
        cancelled = error_result(record.call, f"The {record.call.name} call was cancelled.")
        await self.save(record, Outcome(result=cancelled))


class _AskedAgain(Exception):
    """The call, as a person changed it, was asked again for an approval its policy needs: it does not run now."""


def _told(outcome: Outcome, record: CallRecord) -> Outcome:
    """``outcome``, whose result (if it has one) tells the model first of a person's change to the call's
    arguments."""
    if outcome.result is None:
        return outcome
    return Outcome(result=with_note(outcome.result, record), task=outcome.task, questions=outcome.questions)


def interrupted_message(name: str) -> str:
    """What the model is told of a call of tool ``name`` whose run may have happened in a process that stopped
    before it recorded a result: the call is not run again."""
    return (
        f"The {name} call was interrupted: the process running it stopped before it "
        "recorded a result, so whether the tool finished is not known."
    )


async def run_outcome(call: ToolCall, chat_id: str, running: Awaitable[Any], known: Collection[str] = ()) -> Outcome:
    """What running ``call``'s tool code (``running``: its ``execute`` or ``resume``) in chat ``chat_id`` came to.

    A value that is not a task is the result; a task ends the call (completed, failed or cancelled) or pauses it,
    with its questions not among ``known`` (ids) minted as new. An exception is an error result the model reads
    (logged unless the tool chose it with ``ToolCallError``), except ``ClaimLostError``, which is raised.
    """
    try:
        returned = await running
        if not isinstance(returned, Task):
            return Outcome(result=Message("tool", result_text(returned), tool_call_id=call.id))
    except ClaimLostError:  # another process holds the call now: it carries the call on, not this result
        raise
    except ToolCallError as error:  # the tool chose its error result: no traceback to log
        logger.info("The %s call ended with an error: %s", call.name, error)
        return Outcome(result=error_result(call, str(error), **error.details))
    except Exception as error:
        logger.exception("The %s call raised", call.name)
        return Outcome(result=error_result(call, f"The {call.name} call raised {type(error).__name__}: {error}"))
    returned.tool_call = call
    if returned.completed():
        value = returned.status_message if returned.status_message is not None else returned.data
        return Outcome(result=Message("tool", result_text(value), tool_call_id=call.id))
    if returned.failed() or returned.cancelled():
        what = "failed" if returned.failed() else "was cancelled"
        detail = f": {returned.status_message}" if returned.status_message else "."
        return Outcome(result=error_result(call, f"The {call.name} call {what}{detail}"))
    returned.questions = [
        question if question.id in known else mint(question, call, chat_id) for question in returned.questions
    ]
    new = tuple(question for question in returned.questions if question.id not in known)
    return Outcome(task=returned, questions=new)


def error_result(call: ToolCall, text: str, **extra: Any) -> Message:
    """The tool result that ends ``call`` with an error the model reads."""
    return Message("tool", result_text({"error": text, **extra}), tool_call_id=call.id)


def person_result(call: ToolCall, reason: str, given: dict[str, Any]) -> Message:
    """The tool result that ends ``call`` with the result a person gave (``given``: ``{"result": value}``) in place of
    running its tool, marked as theirs: ``reason`` says so plainly to the model."""
    return Message("tool", result_text({"given_by": "a person", "message": reason, **given}), tool_call_id=call.id)


def closing(call: ToolCall, standing: Standing) -> CallStep:
    """The action that ends ``call`` as ``standing`` (``CLOSES``) says, running no tool code: with an error result,
    or with the result a person gave in place of running the tool."""
    reason, given = standing.reason or "", standing.given
    extra = {"note": standing.note} if standing.note else {}

    async def close() -> Outcome:
        if given is not None:
            return Outcome(result=person_result(call, reason, given))
        return Outcome(result=error_result(call, reason, **extra))

    return close
