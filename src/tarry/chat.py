"""The chat loop: ask the model, run the calls that can run, park the ones that wait."""

from __future__ import annotations

import asyncio
import copy
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeGuard, cast

from tarry.approvals import Approval
from tarry.calls import CallRecord, CallState, Claim, Outcome, Standing, call_state
from tarry.changes import Changes, apply_call, keep_held, rebuild_task
from tarry.clock import utcnow
from tarry.errors import (
    ClaimLostError,
    InvalidArgumentsError,
    MissingToolsError,
    PendingToolCallsError,
    TarryError,
    ToolCallError,
    UnknownQuestionError,
)
from tarry.journal import Journal, MemoryJournal
from tarry.live import LiveCall, current_call
from tarry.messages import (
    Message,
    MessageDone,
    Model,
    ModelRequest,
    StreamEvent,
    StreamingModel,
    TextDelta,
    ToolCall,
    ToolCallEvent,
    ToolChoice,
    result_text,
)
from tarry.principals import Channel, Principal, check_channel, principal_of
from tarry.providers import resolve_model as resolve_model
from tarry.questions import AnswerNeeded, Decision, Question, check_note
from tarry.running import sync_twin
from tarry.tasks import Task
from tarry.text import unstorable
from tarry.tools import Tool, ToolSource, call_maybe_async, settle, tool
from tarry.tracing import mark, model_attributes, span

logger = logging.getLogger("tarry")
CallStep = Callable[[], Awaitable[Outcome]]
"""What carries a call on: runs its tool, or closes it with an error result."""


class Chat:
    """A conversation with a model whose tool calls can wait.

    >>> from tarry.testing import ScriptedModel
    >>> chat = Chat(model=ScriptedModel(["Hello!"]))
    >>> chat.ask_sync("Hi").content
    'Hello!'

    ``complete()`` runs every call that can run, resumes every paused task once, and parks
    (returns normally) when the remaining calls wait on a person or on unfinished work.
    ``max_concurrency`` bounds how many calls of one turn run at once. Leave ``journal`` out: a
    chat made here lives in memory, and one a [`Store`][tarry.store.Store] creates or loads saves
    each change as it happens and sees what other processes recorded.
    """

    def __init__(
        self,
        model: Model | str | None = None,
        tools: Iterable[Tool | ToolSource | Callable[..., Any]] = (),
        instructions: str | None = None,
        *,
        tool_choice: ToolChoice | None = None,
        settings: Mapping[str, Any] | None = None,
        max_concurrency: int = 8,
        id: str | None = None,
        journal: Journal | None = None,
    ) -> None:
        if isinstance(max_concurrency, bool) or not isinstance(max_concurrency, int) or max_concurrency < 1:
            raise ValueError(f"max_concurrency must be a positive int, got {max_concurrency!r}")
        if instructions is not None and not isinstance(instructions, str):
            raise TypeError(f"instructions must be str or None, got {type(instructions).__name__}")
        self.id = id or str(uuid.uuid4())
        self.model = resolve_model(model)
        if not isinstance(tools, list | tuple) and (isinstance(tools, Tool | ToolSource) or callable(tools)):
            raise TypeError("tools must be a list of tools, not a single tool")
        tools = list(tools)
        self._sources: list[_SelectedSource] = [_SelectedSource(item) for item in tools if _is_source(item)]
        self.tools = _tools_by_name([cast(Tool | Callable[..., Any], item) for item in tools if not _is_source(item)])
        self.instructions = instructions
        named = self._sources or tool_choice in ("auto", "none", "required", *self.tools)
        if tool_choice is not None and not named:
            raise ValueError(f"tool_choice must be 'auto', 'none', 'required' or a tool's name; got {tool_choice!r}")
        self.tool_choice = tool_choice
        self.settings = dict(settings or {})
        self.max_concurrency = max_concurrency
        self.messages: list[Message] = []
        self.records: dict[str, CallRecord] = {}
        """The record of every tool call, by call id, in the order the model made them."""
        self.chat_questions: list[Question] = []
        """Questions of the chat itself, asked before any call could wait on them (an MCP server's
        first login, needed to list its tools), oldest first; their ``tool_call`` is ``None``."""
        self._journal: Journal = journal or MemoryJournal()

    # The verbs

    async def ask(self, text: str) -> Message | None:
        """Add a user message, then [`complete`][tarry.Chat.complete]; returns the last assistant message.

        Raises [`PendingToolCallsError`][tarry.errors.PendingToolCallsError], recording nothing, while calls wait.
        """
        current = await self._add_user_message(text, "ask")
        async for _ in self._run(stream=False, once=False, current=current):
            pass
        return self.last_reply

    async def complete(
        self,
        *,
        approve: Iterable[Question | str] = (),
        by: str | Principal | None = None,
        channel: Channel | None = None,
    ) -> Message | None:
        """Carry the chat on until the model has replied or every open call waits.

        Returns the last assistant message: the final reply, or the message whose calls
        wait when the chat parks. On a chat with nothing to do it returns the last reply
        without calling the model.

        ``approve`` approves those questions first (each as [`approve`][tarry.Chat.approve] would,
        ``by`` and ``channel`` saying who and through what, ``"code"`` unless given), then carries
        on; on PostgreSQL that is quicker than [`approve`][tarry.Chat.approve], then ``complete()``.
        An approval that another decision beat is not an error here: the chat carries on from that
        decision (the question shows which it was). The errors of [`approve`][tarry.Chat.approve]
        are raised before the chat carries on; approvals recorded before the error stay recorded.
        """
        # On PostgreSQL, the statement that records the approval of the last question a call
        # waits on also claims the call for this chat object, so the call runs without a claim
        # of its own: one write fewer per call freed (see _decide's frees).
        approving = _Approvals.of("complete", approve, by, channel)
        try:
            await self._approve_first(approving)
            async for _ in self._run(stream=False, once=False):
                pass
        finally:
            await self._journal.release_unused()
        return self.last_reply

    async def step(self) -> Message | None:
        """Do one round: carry every call on that can go on, then, if none waits, ask the model once.

        Returns the model's new message, or ``None`` when the chat waits or had nothing to ask.
        """
        reply = None
        async for event in self._run(stream=False, once=True):
            if isinstance(event, MessageDone):
                reply = event.message
        return reply

    async def stream(
        self,
        text: str | None = None,
        *,
        approve: Iterable[Question | str] = (),
        by: str | Principal | None = None,
        channel: Channel | None = None,
    ) -> AsyncIterator[StreamEvent]:
        """Like [`ask`][tarry.Chat.ask] (or [`complete`][tarry.Chat.complete] without ``text``), yielding the model's
        replies as they stream.

        Yields [`TextDelta`][tarry.messages.TextDelta] pieces, [`ToolCallEvent`][tarry.messages.ToolCallEvent]
        for each call, and [`MessageDone`][tarry.messages.MessageDone] with every recorded reply.
        The transcript afterwards is the same as without streaming. ``approve``, ``by`` and
        ``channel`` approve questions first, as [`complete`][tarry.Chat.complete] does; not with ``text``.
        """
        approving = _Approvals.of("stream", approve, by, channel)
        if text is not None and approving.questions:
            raise TypeError("stream() takes text or approve=, not both")
        try:
            await self._approve_first(approving)
            current = await self._add_user_message(text, "stream") if text is not None else False
            async for event in self._run(stream=True, once=False, current=current):
                yield event
        finally:
            if approving.questions:
                await self._journal.release_unused()

    async def _approve_first(self, approving: _Approvals) -> None:
        """Approve ``approving``'s questions, each freeing its call's claim for this chat object where it can."""
        for item in approving.questions:
            target = await self._find(item)
            await self._decide(
                target, "accept", target.check_answer(), None, approving.by, approving.channel, frees=True
            )

    async def pending_questions(self) -> list[Question]:
        """The questions the chat waits on: its own first (a login), then its calls', in the order of the calls."""
        await self._refresh(listing=True)
        now = utcnow()
        own = [question for question in self.chat_questions if question.is_open(now)]
        return own + [question for record in self.records.values() for question in record.pending_questions(now)]

    async def pending_tasks(self) -> list[Task]:
        """The paused tasks that wait on no question: work that finishes later."""
        await self._refresh(listing=True)
        return [
            record.task
            for record in self.records.values()
            if record.open and record.task is not None and not record.task.waits_on_person()
        ]

    async def answer(
        self,
        question: Question | str,
        value: Any = None,
        /,
        *,
        by: str | Principal | None = None,
        channel: Channel = "code",
        **values: Any,
    ) -> bool:
        """Answer ``question`` (a [`Question`][tarry.Question] or its id); answering an approval approves it.

        A positional value answers a one-field question, keywords answer fields by name (a
        field named ``by`` or ``channel`` is answered through a dict as the value). ``by`` says
        who decides (an identity or a [`Principal`][tarry.principals.Principal]; ``None``: recorded
        as nobody known), ``channel`` through what. Returns ``True`` when this call recorded
        the decision (or, for an approval that needs several people, counted this approval)
        and ``False`` when another decision came first. Raises
        [`UnknownQuestionError`][tarry.errors.UnknownQuestionError],
        [`InvalidAnswerError`][tarry.errors.InvalidAnswerError],
        [`QuestionExpiredError`][tarry.errors.QuestionExpiredError] or
        [`NotAllowedError`][tarry.errors.NotAllowedError].
        """
        target = await self._find(question)
        accepted = target.check_answer(value, values)
        return await self._decide(target, "accept", accepted, None, principal_of(by), check_channel(channel))

    async def approve(
        self, question: Question | str, *, by: str | Principal | None = None, channel: Channel = "code"
    ) -> bool:
        """Approve ``question``; same arguments, return value and errors as [`answer`][tarry.Chat.answer]."""
        target = await self._find(question)
        principal, through = principal_of(by), check_channel(channel)
        return await self._decide(target, "accept", target.check_answer(), None, principal, through)

    async def decline(
        self,
        question: Question | str,
        note: str | None = None,
        *,
        by: str | Principal | None = None,
        channel: Channel = "code",
    ) -> bool:
        """Decline ``question``; the note reaches the model with the declined result.

        Raises [`ToolCallRunningError`][tarry.errors.ToolCallRunningError] when the question's call runs right now.
        """
        check_note(note)
        principal, through = principal_of(by), check_channel(channel)
        return await self._decide(await self._find(question), "decline", None, note, principal, through)

    async def cancel(self) -> None:
        """Cancel every paused task (its ``cancel()``) and close every waiting call with a cancelled result.

        A question of the chat itself (a login) is cancelled too: the chat asks it again only
        once the user asks something new.
        """
        for _attempt in range(3):
            await self._refresh()
            for question in self.chat_questions:
                if question.is_open(utcnow()):
                    await self._decide(question, "cancel", None, None, None, "code")
            if not await self._cancel_open_calls():
                return

    async def _cancel_open_calls(self) -> bool:
        """Cancel what waits; True when a call had changed meanwhile and should be looked at again."""
        stale = False
        for record in [record for record in self.records.values() if record.open]:
            async with self._hold(record) as claim:
                stale = stale or claim is Claim.STALE
                if not claim.held or not record.open:
                    continue
                if record.task is not None:
                    try:
                        await settle(record.task.cancel())
                    except Exception:
                        logger.exception("Cancelling the task of the %s call failed", record.call.name)
                # A call already declined (or lapsed) keeps that result, so a decline note still reaches the model.
                standing = self._standing(record, set())
                if standing.state is CallState.CLOSES:
                    await self._save(record, await _closing(record.call, standing.reason or "", standing.note)())
                    continue
                for question in record.pending_questions(utcnow()):
                    await self._decide(question, "cancel", None, None, None, "code")
                await self._save(
                    record, Outcome(result=_error(record.call, f"The {record.call.name} call was cancelled."))
                )
        return stale

    ask_sync = sync_twin(ask)
    complete_sync = sync_twin(complete)
    step_sync = sync_twin(step)
    pending_questions_sync = sync_twin(pending_questions)
    pending_tasks_sync = sync_twin(pending_tasks)
    answer_sync = sync_twin(answer)
    approve_sync = sync_twin(approve)
    decline_sync = sync_twin(decline)
    cancel_sync = sync_twin(cancel)

    # Tool sources (MCP servers)

    def with_mcp(
        self,
        server: ToolSource,
        only: Iterable[str] | None = None,
        exclude: Iterable[str] | None = None,
        prefix: str | None = None,
    ) -> Chat:
        """Add the tools of ``server`` (an MCP server, or any tool source); returns the chat.

        ``only`` keeps just the named tools, ``exclude`` drops the named ones (both by the
        server's names), and ``prefix`` is put before each tool's name as the model sees it.
        The server is asked for its tools when the chat first needs them.
        """
        if not isinstance(server, ToolSource):
            raise TypeError(f"with_mcp() takes an MCP server (a tool source), got {server!r}")
        self._sources.append(_SelectedSource(server, only, exclude, prefix))
        return self

    async def load_tools(self) -> dict[str, Tool]:
        """Ask every tool source (MCP server) not yet asked for its tools and add them; returns ``tools``.

        The chat does this itself before it first needs its tools; call it to rebuild the
        tasks of calls saved by another process, which needs the tools.
        """
        for source in self._sources:
            if source.loaded:
                continue
            for item in await source.tools():
                if item.name in self.tools:
                    raise ValueError(f"Two tools are named {item.name!r}; tool names must be unique in a chat")
                self.tools[item.name] = item
            source.loaded = True
        return self.tools

    async def _ask_live(self, record: CallRecord, question: Question, run: _Run) -> Question:
        """Record ``question`` for the running call of ``record`` and wait for its decision.

        When ``run`` runs again what a stopped process ran, while it asks the same questions in the same order,
        each is the earlier run's: ``question`` takes it over (its id, its answer), so an answer a person gave
        it is not asked for twice, and one still to come reaches this run.
        """
        earlier = run.repeats.pop(0) if run.repeats else None
        if earlier is not None and _asks_the_same(earlier, question) and not earlier.expired(utcnow()):
            # One object for the question, as for one asked anew; its dicts and lists its own.
            vars(question).update({name: copy.copy(value) for name, value in vars(earlier).items()})
            record.questions[record.questions.index(earlier)] = question
        else:
            # It asks something else: what the earlier run asked from here on is not this run's, and nothing waits
            # for its answers.
            unused = [earlier, *run.repeats] if earlier is not None else []
            run.repeats.clear()
            await self._close_unused(record, unused, _RAN_AGAIN)
            question.extra["awaited"] = True
            if run.last_asked is not None:
                question.extra["after"] = run.last_asked
            self._mint(question, record.call)
            await self._journal.add_question(record.call.id, len(record.questions), question)
            record.questions.append(question)
        run.last_asked = question.id
        if question.decision is None:
            question.take_decision(await self._journal.wait_for_decision(question))
        return question

    async def _close_unused(self, record: CallRecord, questions: list[Question], note: str) -> None:
        """Cancel, through the ``code`` channel, those of ``questions`` still open: asked by a run of the call's
        tool that stopped, and not asked again by the run of it this process holds, they are answered by nobody.
        A person's answer that comes first is kept (and unused). Raises [`ClaimLostError`][tarry.errors.ClaimLostError]
        once this process no longer holds the call, cancelling nothing."""
        now = utcnow()
        unused = [question for question in questions if question.is_open(now)]
        if not unused:
            return
        closed = {question.id: question for question in await self._journal.close_unused(record.call.id, unused, note)}
        for question in unused:
            if question.id in closed:
                question.take_decision(closed[question.id])

    # What the chat shows

    @property
    def waiting(self) -> bool:
        """True while calls, or the chat itself (a login), wait on a person or on unfinished work."""
        return self._waits_on_own_question() or any(record.open for record in self.records.values())

    @property
    def stopped(self) -> bool:
        """True when a person declined (or someone cancelled) the chat's own question, a login, and the user
        has asked nothing since: the chat goes on once the user asks again."""
        last = self.chat_questions[-1] if self.chat_questions else None
        return (
            last is not None
            and last.decision in ("decline", "cancel")
            and last.extra.get("messages") == len(self.messages)
        )

    @property
    def last_reply(self) -> Message | None:
        """The last assistant message, or ``None`` before the model spoke."""
        return next((message for message in reversed(self.messages) if message.role == "assistant"), None)

    def record_of(self, question: Question) -> CallRecord | None:
        """The record of the call that asked ``question``."""
        return next((record for record in self.records.values() if question in record.questions), None)

    def __repr__(self) -> str:
        return f"<Chat {self.id} messages={len(self.messages)} waiting={self.waiting}>"

    # What the journal records and reads back

    async def _refresh(self, *, at_claim: bool = False, listing: bool = False) -> bool:
        """Take in what other processes recorded since this chat object last looked (its current turn on);
        whether anything had changed.

        ``at_claim``: the chat's next step claims calls, which may check instead; ``listing``: the look
        only lists what the chat waits on (see ``Journal.refresh``).
        """
        start = _tail_start(self.messages)
        asked = {name: True for name, given in (("at_claim", at_claim), ("listing", listing)) if given}
        looking = self._journal.refresh(start, **asked)
        async with looking as changes:
            if changes is not None:
                self._apply(changes)
        return changes is not None

    def _apply(self, changes: Changes) -> None:
        """Make the chat what ``changes`` holds, keeping the questions and records callers already hold.

        The changed tasks are rebuilt first, so a state that cannot be loaded
        ([`CorruptStateError`][tarry.errors.CorruptStateError]) leaves the chat as it was.
        """
        tasks = {}
        for change in changes.calls:
            if change.state_changed:
                held = self.records.get(change.call.id)
                call = change.call if held is None else held.call
                tasks[call.id] = rebuild_task(self.id, call, change.state, self.tools.get(call.name))
        self.messages[changes.start :] = changes.messages
        self.chat_questions = keep_held(self.chat_questions, changes.chat_questions)
        for change in changes.calls:
            record = self.records.get(change.call.id)
            if record is None:
                record = self.records[change.call.id] = CallRecord(change.call)
            apply_call(record, change, tasks.get(change.call.id))

    async def _decide(
        self,
        question: Question,
        decision: Decision,
        answer: dict[str, Any] | None,
        note: str | None,
        by: Principal | None,
        channel: Channel,
        *,
        frees: bool = False,
    ) -> bool:
        """Record a decision through the journal, then take it onto ``question``; False when another came first.

        ``frees``: the chat carries on next, so when this decision leaves a call that has not run yet
        waiting on nothing else, the journal may claim the call with it (see ``Journal.decide``),
        unless the chat must first load tools or wait on a question of its own.
        """
        record = self.record_of(question)
        running, closed = (record.running, not record.open) if record is not None else (False, False)
        frees_call = (
            frees
            and record is not None
            and record.task is None
            and not running
            and not closed
            and record.pending_questions(utcnow()) == [question]
            and all(source.loaded for source in self._sources)
            and not self._waits_on_own_question()
        )
        asked = {"claim": True} if frees_call else {}
        decided = await self._journal.decide(
            question, decision, answer, note, by, channel, running=running, closed=closed, **asked
        )
        if decided is None:
            return False
        question.take_decision(decided)
        return True

    @asynccontextmanager
    async def _hold(self, record: CallRecord) -> AsyncIterator[Claim]:
        """Claim ``record``'s call through the journal for the block, marking the record as running meanwhile."""
        async with self._journal.hold_call(record.call.id) as claim:
            if not claim.held:
                yield claim
                return
            record.running = True
            try:
                yield claim
            finally:
                record.running = False

    # The loop

    async def _add_user_message(self, text: str, verb: str) -> bool:
        """Save the user's message, claiming the turn for the reply; True when the chat holds all that is recorded.

        The journal refuses the message while calls wait in the database; the chat reads them
        then, to name them.
        """
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"{verb}() needs the user's text, got {text!r}")
        message = Message("user", text)
        try:
            self._refuse_while_calls_wait()
            current = await self._journal.append(message, claim_turn=self.model is not None)
        except PendingToolCallsError:
            await self._refresh()
            self._refuse_while_calls_wait()
            raise
        self.messages.append(message)
        return current

    def _refuse_while_calls_wait(self) -> None:
        waiting = [record.call.name for record in self.records.values() if record.open]
        if waiting:
            raise PendingToolCallsError(
                f"{len(waiting)} tool call(s) still wait ({', '.join(waiting)}): answer, approve, decline "
                "or cancel them, and complete() the chat, before asking again"
            )

    async def _run(self, *, stream: bool, once: bool, current: bool = False) -> AsyncIterator[StreamEvent]:
        """The loop; with ``current`` (the chat holds all that is recorded) its first look at the journal is skipped."""
        resumed: set[str] = set()
        try:
            if not all(source.loaded for source in self._sources):
                if not current:
                    await self._refresh()
                    current = True
                if not await self._load_tools_or_park():
                    return
            look_now = False
            while True:
                at_claim = not current and not look_now and self._claims_next(resumed)
                if not current and await self._refresh(at_claim=at_claim):
                    at_claim = False  # the journal looked, and the chat now holds what it found
                look_now = False
                missing = self._missing_tools(resumed)
                if missing and at_claim:  # time moved on since the chat last looked: refuse only what a look confirms
                    current, look_now = False, True
                    continue
                self._refuse_missing_tools(missing)
                lost, claimed = await self._carry_calls(resumed)
                if lost:
                    current = False
                    continue  # another process took a call over: look at what it recorded
                if at_claim and not claimed:  # no claim checked the chat after all (time moved on): look now
                    current, look_now = False, True
                    continue
                if self.waiting:
                    waiting = sum(record.open for record in self.records.values())
                    logger.info("Chat %s parked: %d call(s) wait", self.id, waiting, extra={"chat_id": self.id})
                if self.waiting or not self._needs_model():
                    return
                reply, turn = None, _Turn()
                async for event in self._model_turn(stream, turn):
                    if isinstance(event, MessageDone):
                        reply = event.message
                    yield event
                if once or reply is None or not reply.tool_calls:
                    return
                current = turn.current
        finally:
            await self._journal.release_unused()

    async def _load_tools_or_park(self) -> bool:
        """Load the tool sources' tools; ``False`` when the chat waits on a question of its own instead.

        A source that needs a person first (``AnswerNeeded``: a login)
        is asked again only once the chat's last own question was answered, or lapsed; a
        declined or cancelled one stops the chat until the user asks something new.
        """
        if self.stopped or self._waits_on_own_question():
            return False
        try:
            await self.load_tools()
        except AnswerNeeded as needed:
            question = needed.question
            question.extra["messages"] = len(self.messages)
            self._mint(question, None)
            if not await self._journal.add_chat_question(len(self.chat_questions), question):
                raise
            self.chat_questions.append(question)
            ids = {"chat_id": self.id, "question_id": question.id}
            logger.info("Chat %s parked: it waits on a %s question of its own", self.id, question.kind, extra=ids)
            mark("pause chat", {**_span_ids(ids), "tarry.pause.reason": "question"})
            return False
        return True

    def _waits_on_own_question(self) -> bool:
        now = utcnow()
        return any(question.is_open(now) for question in self.chat_questions)

    def _claims_next(self, resumed: set[str]) -> bool:
        """Whether, as this chat object holds it, its next step claims calls (some can go on, none lacks its tool)."""
        return bool(self._movable(resumed)) and not self._missing_tools(resumed)

    def _missing_tools(self, resumed: set[str]) -> list[str]:
        """The tools this chat lacks that calls which paused (so their tools were known) would now run."""
        return sorted(
            {
                record.call.name
                for record in self.records.values()
                if record.open
                and (record.questions or record.task is not None)
                and record.call.name not in self.tools
                and self._standing(record, resumed).state is CallState.RUNS
            }
        )

    def _refuse_missing_tools(self, missing: list[str]) -> None:
        """Refuse to go on while a call that paused (so its tool was known) would now run a tool this chat lacks
        (``missing``, from ``_missing_tools``).

        Carrying it on would close it as an unknown tool and use up its approval or answer. A call
        that still waits, or that closes without its tool (declined, lapsed), is no reason to refuse.
        """
        if missing:
            names = ", ".join(missing)
            raise MissingToolsError(
                f"Calls of chat {self.id} wait on tools this chat was not given: {names}. "
                "Load the chat with those tools (tools=[...]) to carry it on, or cancel it.",
                missing,
            )

    async def _carry_calls(self, resumed: set[str]) -> tuple[bool, bool]:
        """Carry every call on that can go on, a bounded number at once; whether a claim was lost, and whether
        any claim was made."""
        limit = asyncio.Semaphore(self.max_concurrency)
        lost = False

        async def carry(record: CallRecord) -> None:
            nonlocal lost
            async with limit:
                lost = not await self._carry(record, resumed) or lost

        runnable = self._movable(resumed)
        # Not a TaskGroup: one carry failing (a database error) must not cancel the others mid-tool.
        outcomes = await asyncio.gather(*(carry(record) for record in runnable), return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        return lost, bool(runnable)

    def _movable(self, resumed: set[str]) -> list[CallRecord]:
        """The records of the calls that can go on now (run, or close), each under a claim."""
        moving = (CallState.RUNS, CallState.CLOSES)
        return [record for record in self.records.values() if self._standing(record, resumed).state in moving]

    async def _carry(self, record: CallRecord, resumed: set[str]) -> bool:
        """Do what carries ``record`` on, under its claim; False when the claim was lost or the call was stale."""
        async with self._hold(record) as claim:
            if claim is Claim.STALE:
                return False
            standing = self._standing(record, resumed)
            again = _Run(_asked_by_the_last_run(record) if claim is Claim.RECLAIMED else [])
            run = None if claim is Claim.BUSY else self._next_step(record, standing, again)
            if run is None:
                return True
            runs_tool = standing.state is CallState.RUNS
            tool = self.tools.get(record.call.name)
            name, call_id, ids = record.call.name, record.call.id, {"chat_id": self.id, "call_id": record.call.id}
            if claim is Claim.RECLAIMED:
                logger.warning(
                    "Reclaimed the %s call %s: the lease of the process running it ran out", name, call_id, extra=ids
                )
            else:
                logger.debug("Claimed the %s call %s", name, call_id, extra=ids)
            if runs_tool and claim is Claim.RECLAIMED and not (tool is not None and tool.idempotent):
                message = (
                    f"The {record.call.name} call was interrupted: the process running it stopped before it "
                    "recorded a result, so whether the tool finished is not known."
                )
                logger.warning("Closed the %s call %s as interrupted", name, call_id, extra=ids)
                outcome = Outcome(result=_error(record.call, message))
            else:
                if runs_tool:
                    resumed.add(record.call.id)
                checking = runs_tool and record.task is not None
                attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, **_span_ids(ids)}
                with span(f"execute_tool {name}", {**attributes, "gen_ai.tool.call.id": call_id}):
                    try:
                        if runs_tool and claim is Claim.RECLAIMED and not again.repeats:  # nothing will be reused
                            earlier = [question for question in record.questions if question.extra.get("awaited")]
                            await self._close_unused(record, earlier, _RAN_AGAIN)
                        outcome = await run()
                        if again.repeats:  # the run did not ask again all that the earlier run asked
                            await self._close_unused(record, again.repeats, _RAN_AGAIN)
                    except ClaimLostError:  # the tool asked a question after another process took its call over
                        logger.warning(
                            "Lost the claim on the %s call %s while it ran; another process carries it on",
                            name,
                            call_id,
                            extra=ids,
                        )
                        return False
                if outcome.task is not None:
                    paused: dict[str, str | int] = {
                        "tarry.pause.reason": "question" if outcome.task.questions else "task",
                        "tarry.task.status": str(outcome.task.status),
                        "tarry.questions": len(outcome.questions),
                    }
                    mark(f"pause {name}", {"gen_ai.tool.name": name, **_span_ids(ids), **paused})
                if checking:
                    state = "finished" if outcome.result is not None else "still waits"
                    logger.info("Checked the task of the %s call %s: it %s", name, call_id, state, extra=ids)
            # The result of the last open call makes the model next: claim its turn in the same write.
            last = outcome.result is not None and not any(
                other.open for other in self.records.values() if other is not record
            )
            try:
                await self._save(record, outcome, claim_turn=last and self.model is not None)
            except ClaimLostError:
                logger.warning(
                    "Lost the claim on the %s call %s; another process carries it on", name, call_id, extra=ids
                )
                return False
            return True

    def _standing(self, record: CallRecord, resumed: set[str]) -> Standing:
        return call_state(record, utcnow(), checked=record.call.id in resumed)

    def _next_step(self, record: CallRecord, standing: Standing, run: _Run) -> CallStep | None:
        """What carries ``record`` on from where it stands (as ``run``), or ``None`` while it waits (or is closed)."""
        if standing.state is CallState.CLOSES:
            return _closing(record.call, standing.reason or "", standing.note)
        if standing.state is not CallState.RUNS:
            return None
        task = record.task
        if task is None:
            return lambda: self._execute(record, run)
        return lambda: self._resume(record, task, run)

    async def _execute(self, record: CallRecord, run: _Run) -> Outcome:
        call = record.call
        tool = self.tools.get(call.name)
        if tool is None:
            available = ", ".join(self.tools) or "none"
            return Outcome(result=_error(call, f"Unknown tool {call.name!r}. Available tools: {available}."))
        try:
            arguments = tool.validate(call.arguments)
        except InvalidArgumentsError as error:
            return Outcome(result=_error(call, str(error)))
        return await self._invoke(record, run, tool.execute, arguments)

    async def _resume(self, record: CallRecord, task: Task, run: _Run) -> Outcome:
        own = [question for question in task.questions if question.source is None]
        if own:
            task.answer = own[0].answer
        tool = self.tools.get(record.call.name)
        if tool is None:
            return Outcome(result=_error(record.call, f"The {record.call.name} tool is no longer available."))
        try:
            arguments = tool.validate(record.call.arguments)
        except InvalidArgumentsError as error:  # the tool's parameters changed since the call was made
            return Outcome(result=_error(record.call, str(error)))
        return await self._invoke(record, run, tool.resume, arguments, task)

    async def _invoke(
        self,
        record: CallRecord,
        run: _Run,
        method: Callable[..., Any],
        arguments: dict[str, Any],
        *args: Any,
    ) -> Outcome:
        call = record.call
        live = current_call.set(LiveCall(call, self.id, lambda question: self._ask_live(record, question, run)))
        try:
            returned = await call_maybe_async(method, *args, **arguments)
            if not isinstance(returned, Task):
                return Outcome(result=Message("tool", result_text(returned), tool_call_id=call.id))
        except ClaimLostError:  # another process holds the call now: it carries the call on, not this result
            raise
        except ToolCallError as error:  # the tool chose its error result: no traceback to log
            logger.info("The %s call ended with an error: %s", call.name, error)
            return Outcome(result=_error(call, str(error), **error.details))
        except Exception as error:
            logger.exception("The %s call raised", call.name)
            return Outcome(result=_error(call, f"The {call.name} call raised {type(error).__name__}: {error}"))
        finally:
            current_call.reset(live)
        return self._paused(record, returned)

    def _paused(self, record: CallRecord, task: Task) -> Outcome:
        call = record.call
        task.tool_call = call
        if task.completed():
            value = task.status_message if task.status_message is not None else task.data
            return Outcome(result=Message("tool", result_text(value), tool_call_id=call.id))
        if task.failed() or task.cancelled():
            what = "failed" if task.failed() else "was cancelled"
            detail = f": {task.status_message}" if task.status_message else "."
            return Outcome(result=_error(call, f"The {call.name} call {what}{detail}"))
        fresh = tuple(question for question in task.questions if question not in record.questions)
        for question in fresh:
            self._mint(question, call)
        return Outcome(task=task, questions=fresh)

    def _mint(self, question: Question, call: ToolCall | None) -> None:
        now = utcnow()
        question.id = str(uuid.uuid4())
        question.asked_at = now
        question.tool_call = call
        question.chat_id = self.id
        if question.ttl is not None:
            question.expires_at = now + timedelta(seconds=question.ttl)

    async def _save(self, record: CallRecord, outcome: Outcome, *, claim_turn: bool = False) -> None:
        first = len(record.questions)
        await self._journal.save_call(record.call.id, outcome, first_question=first, claim_turn=claim_turn)
        # A refresh that ran meanwhile (a stored chat read by another coroutine) may already hold the change.
        if outcome.result is not None:
            if record.result is None:
                self.messages.append(outcome.result)
            record.result = outcome.result
        else:
            record.task = outcome.task
            known = {question.id for question in record.questions}
            record.questions.extend(question for question in outcome.questions if question.id not in known)

    def _needs_model(self) -> bool:
        return bool(self.messages) and self.messages[-1].role != "assistant"

    async def _model_turn(self, stream: bool, turn: _Turn) -> AsyncIterator[StreamEvent]:
        if self.model is None:
            raise TarryError("This chat has no model: pass model= to Chat (or to load_chat) to carry it on")
        async with self._journal.hold_turn() as held:
            if not held:
                return
            await self._refresh()
            if self.waiting or not self._needs_model():
                return
            request = ModelRequest(
                messages=tuple(self.messages),
                tools=tuple(tool.schema() for tool in self.tools.values()),
                instructions=self.instructions,
                tool_choice=self._effective_tool_choice(),
                settings=dict(self.settings),
            )
            attributes = model_attributes(self.model.name, self.id, self.settings)
            with span(f"chat {attributes['gen_ai.request.model']}", attributes, client=True, current=False) as traced:
                if stream and isinstance(self.model, StreamingModel):
                    reply = None
                    async for event in self.model.stream(request):
                        if isinstance(event, MessageDone):
                            reply = event.message
                        else:
                            yield event
                    if reply is None:
                        raise TarryError(f"The model {self.model.name} ended its stream without a message")
                else:
                    reply = await self.model.complete(request)
                    if stream:
                        if reply.content:
                            yield TextDelta(reply.content)
                        for call in reply.tool_calls:
                            yield ToolCallEvent(call)
                if reply.usage is not None:
                    usage = {"input_tokens": reply.usage.input_tokens, "output_tokens": reply.usage.output_tokens}
                    traced.set({f"gen_ai.usage.{key}": value for key, value in usage.items()})
            records = self._records_for(reply)
            try:
                turn.current = await self._journal.append(reply, records)
            except ClaimLostError:
                logger.warning(
                    "Lost the turn of chat %s while the model replied; another process took it over", self.id
                )
                await self._refresh()
                return
            self.messages.append(reply)
            for record in records:
                self.records[record.call.id] = record
                if record.needs_approval:
                    ids = {"chat_id": self.id, "call_id": record.call.id}
                    waits_on = {"gen_ai.tool.name": record.call.name, "tarry.pause.reason": "approval"}
                    mark(f"pause {record.call.name}", {**_span_ids(ids), **waits_on})
            yield MessageDone(reply)

    def _effective_tool_choice(self) -> ToolChoice | None:
        """The chat's tool choice, or ``"auto"`` once a forcing choice made the model call a tool this turn."""
        choice = self.tool_choice
        if choice is None or choice in ("auto", "none"):
            return choice
        for message in reversed(self.messages):
            if message.role == "user":
                return choice
            if message.tool_calls:
                return "auto"
        return choice

    def _records_for(self, reply: Message) -> list[CallRecord]:
        if reply.role != "assistant":
            raise TarryError(f"The model replied with a {reply.role!r} message, not an assistant one")
        records: list[CallRecord] = []
        for call in reply.tool_calls:
            if call.id in self.records or any(call.id == other.call.id for other in records):
                raise TarryError(f"The model reused the tool call id {call.id!r}")
            _check_call_keys(call)
            policy = self._approval_of(call)
            record = CallRecord(call, needs_approval=policy is not None)
            if policy is not None:
                tool = self.tools[call.name]
                approval = Question(
                    id="",
                    kind="approval",
                    message=f"Approve the {call.name} call?",
                    ttl=tool.approval_ttl,
                    policy=None if policy == Approval() else policy,
                )
                self._mint(approval, call)
                record.questions.append(approval)
            records.append(record)
        return records

    def _approval_of(self, call: ToolCall) -> Approval | None:
        tool = self.tools.get(call.name)
        if tool is None:
            return None
        try:
            tool.validate(call.arguments)
        except InvalidArgumentsError:
            return None
        try:
            return tool.approval_policy(call)
        except Exception:
            logger.exception("The approval rule of %s raised; asking a person to approve the call", call.name)
            return Approval()

    async def _find(self, question: Question | str) -> Question:
        """This chat's question with the id of ``question``, read again from the journal if it is new here."""
        wanted = question.id if isinstance(question, Question) else question
        if not isinstance(wanted, str):
            raise UnknownQuestionError(f"A question is a Question or its id, got {question!r}")
        for attempt in range(2):
            for candidate in self.chat_questions:
                if candidate.id == wanted:
                    return candidate
            for record in self.records.values():
                for candidate in record.questions:
                    if candidate.id == wanted:
                        return candidate
            if attempt == 0:
                await self._refresh()  # another process may have asked it since we last looked
        raise UnknownQuestionError(f"This chat never asked question {wanted!r}")


@dataclass(frozen=True)
class _Approvals:
    """The questions ``complete()`` or ``stream()`` approve before carrying the chat on, by whom, through what."""

    questions: list[Question | str]
    by: Principal | None
    channel: Channel

    @classmethod
    def of(
        cls, verb: str, approve: Iterable[Question | str], by: str | Principal | None, channel: Channel | None
    ) -> _Approvals:
        """Check a verb's ``approve``, ``by`` and ``channel`` (``"code"`` unless given)."""
        if isinstance(approve, str | Question):
            raise TypeError(f"{verb}(approve=...) takes a list of questions (or their ids), not one question")
        questions = list(approve)
        if not questions and (by is not None or channel is not None):
            raise TypeError(f"{verb}() takes by= and channel= only with approve=: they say who approves")
        return cls(questions, principal_of(by), check_channel("code" if channel is None else channel))


class _Turn:
    """What one model turn left behind for the loop: whether the chat still holds all that is recorded."""

    def __init__(self) -> None:
        self.current = False


class _SelectedSource:
    """A tool source with the chat's choice of its tools (``with_mcp``'s only/exclude/prefix)."""

    def __init__(
        self,
        source: ToolSource,
        only: Iterable[str] | None = None,
        exclude: Iterable[str] | None = None,
        prefix: str | None = None,
    ) -> None:
        self.source = source
        self.only = None if only is None else set(only)
        self.exclude = set(exclude or ())
        self.prefix = prefix or ""
        self.loaded = False

    async def tools(self) -> list[Tool]:
        chosen = []
        for item in await self.source.list_tools():
            if (self.only is not None and item.name not in self.only) or item.name in self.exclude:
                continue
            if self.prefix:
                item = copy.copy(item)
                item.name = self.prefix + item.name
            chosen.append(item)
        return chosen


def _tail_start(messages: list[Message]) -> int:
    """Where the chat's current turn starts: its last assistant message (0 before the model spoke)."""
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].role == "assistant":
            return index
    return 0


def _span_ids(ids: dict[str, str]) -> dict[str, str]:
    """A log record's ids as span attributes."""
    return {f"tarry.{key}": value for key, value in ids.items()}


_RAN_AGAIN = "The run of the tool that asked this stopped; the run that took the call over did not ask it again."
"""The note of a question cancelled because no run of its call will read the answer."""


@dataclass
class _Run:
    """One run of a call's tool: what the run it repeats asked and this one has not asked again yet, in order
    (see ``Chat._ask_live``), and the id of the question this run asked last."""

    repeats: list[Question]
    last_asked: str | None = None


def _asked_by_the_last_run(record: CallRecord) -> list[Question]:
    """What the call's last run asked while it ran, in order, when it ran ``execute`` and no run recorded a pause
    (each earlier run was then cut short, and the last one asked the last question); otherwise nothing.

    Each question a run asks anew names the one the run asked before it (``extra["after"]``).
    """
    asked = {question.id: question for question in record.questions if question.extra.get("awaited")}
    if record.task is not None or not asked:
        return []
    chain = [list(asked.values())[-1]]
    while (before := asked.get(chain[-1].extra.get("after", ""))) is not None and before not in chain:
        chain.append(before)
    return chain[::-1]


def _asks_the_same(earlier: Question, question: Question) -> bool:
    """Whether ``question`` asks what ``earlier`` asked: the same kind, words, fields and asker. Never a page to
    visit: what a visit completes is the request that named it (an MCP server's elicitation id)."""

    def asked(one: Question) -> tuple[Any, ...]:
        return one.kind, one.message, one.requested_schema if one.fields else None, one.source

    return question.kind != "url" and asked(earlier) == asked(question)


def _error(call: ToolCall, text: str, **extra: Any) -> Message:
    return Message("tool", result_text({"error": text, **extra}), tool_call_id=call.id)


def _closing(call: ToolCall, text: str, note: str | None = None) -> CallStep:
    """The action that ends ``call`` with an error result, running no tool code."""
    extra = {"note": note} if note else {}

    async def close() -> Outcome:
        return Outcome(result=_error(call, text, **extra))

    return close


def _tools_by_name(tools: Iterable[Tool | Callable[..., Any]]) -> dict[str, Tool]:
    if isinstance(tools, Tool) or callable(tools):
        raise TypeError("tools must be a list of tools, not a single tool")
    by_name: dict[str, Tool] = {}
    for item in tools:
        made = item if isinstance(item, Tool) else tool(item) if callable(item) else None
        if made is None:
            raise TypeError(f"A tool must be a Tool or a function, got {item!r}")
        if made.name in by_name:
            raise ValueError(f"Two tools are named {made.name!r}; tool names must be unique in a chat")
        by_name[made.name] = made
    return by_name


def _is_source(item: object) -> TypeGuard[ToolSource]:
    """Whether ``item`` supplies tools; a [`Tool`][tarry.Tool] does only if it also lists tools, which is quicker to ask
    than the protocol (about 10 µs a check)."""
    return hasattr(item, "list_tools") if isinstance(item, Tool) else isinstance(item, ToolSource)


CALL_KEY_LIMIT = 200
"""The longest tool call id or tool name a chat keeps (no tool's name is longer: providers allow 64 characters)."""


def _check_call_keys(call: ToolCall) -> None:
    """Refuse a call whose id or tool name no store could keep as a key (too long, NUL, a lone surrogate): the
    reply is not recorded, and asking the model again may bring a usable one."""
    for what, text in (("id", call.id), ("tool name", call.name)):
        problem = unstorable(text) or (f"{len(text)} characters" if len(text) > CALL_KEY_LIMIT else None)
        if problem is not None:
            raise TarryError(
                f"The model sent a tool call whose {what} tarry cannot keep ({problem}; at most "
                f"{CALL_KEY_LIMIT} characters, no NUL or lone surrogate): {text[:60]!r}; nothing was recorded"
            )
