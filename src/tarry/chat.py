"""The chat loop: ask the model, run the calls that can run, park the ones that wait."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any

from tarry.calls import CallRecord
from tarry.changes import Changes, tail_start, take_in
from tarry.clock import utcnow
from tarry.decisions import (
    Approvals,
    check_respondable,
    check_seen,
    find_question,
    given_result,
    is_call_approval,
    question_id,
    record_decision,
)
from tarry.edits import check_edit
from tarry.errors import UnknownQuestionError
from tarry.journal import Journal, MemoryJournal
from tarry.loop import ChatLoop
from tarry.messages import Message, MessageDone, Model, StreamEvent, ToolChoice
from tarry.principals import Channel, Principal, check_channel, principal_of
from tarry.providers import resolve_model
from tarry.questions import Decision, Question, check_note
from tarry.running import sync_twin
from tarry.tasks import Task
from tarry.tools import Tool, ToolSource
from tarry.toolsets import SelectedSource, check_tool_choice, load_sources, split_tools

logger = logging.getLogger("tarry")


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
        _check_options(max_concurrency, instructions)
        self.id = id or str(uuid.uuid4())
        self.model = resolve_model(model)
        self._sources, self.tools = split_tools(tools)
        self.instructions = instructions
        check_tool_choice(tool_choice, self._sources, self.tools)
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
        async with self._journal.session():
            await self._loop().add_user_message(text, "ask")
            async for _ in self._loop().run(stream=False, once=False):
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
        approving = Approvals.of("complete", approve, by, channel)
        async with self._journal.session():
            await self._approve_first(approving)
            async for _ in self._loop().run(stream=False, once=False):
                pass
        return self.last_reply

    async def step(self) -> Message | None:
        """Do one round: carry every call on that can go on, then, if none waits, ask the model once.

        Returns the model's new message, or ``None`` when the chat waits or had nothing to ask.
        """
        reply = None
        async with self._journal.session():
            async for event in self._loop().run(stream=False, once=True):
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
        approving = Approvals.of("stream", approve, by, channel)
        if text is not None and approving.questions:
            raise TypeError("stream() takes text or approve=, not both")
        async with self._journal.session():
            await self._approve_first(approving)
            if text is not None:
                await self._loop().add_user_message(text, "stream")
            async for event in self._loop().run(stream=True, once=False):
                yield event

    async def _approve_first(self, approving: Approvals) -> None:
        """Approve ``approving``'s questions; a decision that frees a call may start it for this run (the session's)."""
        for item in approving.questions:
            target = await self._find(item)
            await self._decide(
                target, "accept", target.check_answer(), None, approving.by, approving.channel, frees=True
            )

    async def pending_questions(self) -> list[Question]:
        """The questions the chat waits on: its own first (a login), then its calls', in the order of the calls."""
        await self._refresh()
        now = utcnow()
        own = [question for question in self.chat_questions if question.is_open(now)]
        return own + [question for record in self.records.values() for question in record.pending_questions(now)]

    async def question(self, question: Question | str) -> Question:
        """The chat's question with the id of ``question`` (a [`Question`][tarry.Question] or its id), as recorded
        now: a question is a value, so after [`answer`][tarry.Chat.answer], [`approve`][tarry.Chat.approve] or
        [`decline`][tarry.Chat.decline] this is how to read its [`verdict`][tarry.Question.verdict].

        Raises [`UnknownQuestionError`][tarry.errors.UnknownQuestionError] for a question this chat never asked.
        """
        await self._refresh()
        return await self._find(question)

    async def pending_tasks(self) -> list[Task]:
        """The paused tasks that wait on no question: work that finishes later."""
        await self._refresh()
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
        async with self._journal.session():
            target = await self._find(question)
            accepted = target.check_answer(value, values)
            return await self._decide(target, "accept", accepted, None, principal_of(by), check_channel(channel))

    async def approve(
        self,
        question: Question | str,
        *,
        arguments: Mapping[str, Any] | None = None,
        by: str | Principal | None = None,
        channel: Channel = "code",
        seen: str | None = None,
    ) -> bool:
        """Approve ``question``; same arguments, return value and errors as [`answer`][tarry.Chat.answer].

        ``arguments`` changes the call's arguments as it approves them: parameter names to new values, checked
        against the parameters its tool lets a person change ([`InvalidAnswerError`][tarry.errors.InvalidAnswerError]
        names each one that is wrong). See [`tarry.edits`][tarry.edits]. ``seen`` is the
        [`proposal_digest`][tarry.Question.proposal_digest] of the question the approver was shown: when the call's
        arguments changed since (another person approved them changed), nothing is recorded and
        [`ProposalChangedError`][tarry.errors.ProposalChangedError] says what they are now.
        """
        seen = check_seen(seen)
        async with self._journal.session():
            target = await self._find(question)
            principal, through = principal_of(by), check_channel(channel)
            accepted = target.check_answer() if arguments is None else check_edit(target, arguments)
            return await self._decide(target, "accept", accepted, None, principal, through, seen=seen)

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
        async with self._journal.session():
            return await self._decide(await self._find(question), "decline", None, note, principal, through)

    async def respond(
        self,
        question: Question | str,
        result: Any,
        *,
        by: str | Principal | None = None,
        channel: Channel = "code",
        seen: str | None = None,
    ) -> bool:
        """Answer a call's approval with the call's result, given by a person in place of running the tool.

        The tool never runs: carrying the chat on closes the call with ``result`` (any JSON value; text is the common
        case), marked for the model as given by a person. The decision is ``"respond"``; it needs what a decline
        needs of the approval's policy. Same ``by``, ``channel`` and return value as [`answer`][tarry.Chat.answer].
        Raises [`NotRespondableError`][tarry.errors.NotRespondableError] for any question but the approval a call
        waits on before it runs, [`InvalidAnswerError`][tarry.errors.InvalidAnswerError] for a result that is no
        JSON value, and the errors of [`answer`][tarry.Chat.answer]. ``seen``, the
        [`proposal_digest`][tarry.Question.proposal_digest] of the question as the person saw it, refuses the response
        when the call's arguments changed since, as [`approve`][tarry.Chat.approve]'s does.
        """
        given, seen = given_result(result), check_seen(seen)
        principal, through = principal_of(by), check_channel(channel)
        async with self._journal.session():
            target = await self._find(question)
            check_respondable(target, call_approval=is_call_approval(self.record_of(target), target))
            return await self._decide(target, "respond", given, None, principal, through, seen=seen)

    async def cancel(self) -> None:
        """Cancel every paused task (its ``cancel()``) and close every waiting call with a cancelled result.

        A question of the chat itself (a login) is cancelled too: the chat asks it again only
        once the user asks something new.
        """
        async with self._journal.session():
            for _attempt in range(3):
                await self._refresh()
                for question in self.chat_questions:
                    if question.is_open(utcnow()):
                        await self._decide(question, "cancel", None, None, None, "code")
                if not await self._loop().carrier().cancel_open(self._cancel_question):
                    return  # else a call had changed meanwhile: look at it again

    async def _cancel_question(self, question: Question) -> bool:
        return await self._decide(question, "cancel", None, None, None, "code")

    ask_sync = sync_twin(ask)
    complete_sync = sync_twin(complete)
    step_sync = sync_twin(step)
    pending_questions_sync = sync_twin(pending_questions)
    pending_tasks_sync = sync_twin(pending_tasks)
    question_sync = sync_twin(question)
    answer_sync = sync_twin(answer)
    approve_sync = sync_twin(approve)
    decline_sync = sync_twin(decline)
    respond_sync = sync_twin(respond)
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
        self._sources.append(SelectedSource(server, only, exclude, prefix))
        return self

    async def load_tools(self) -> dict[str, Tool]:
        """Ask every tool source (MCP server) not yet asked for its tools and add them; returns ``tools``.

        The chat does this itself before it first needs its tools; call it to rebuild the
        tasks of calls saved by another process, which needs the tools.
        """
        await load_sources(self._sources, self.tools)
        return self.tools

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
        return last is not None and last.decision in ("decline", "cancel") and last.messages_said == len(self.messages)

    @property
    def last_reply(self) -> Message | None:
        """The last assistant message, or ``None`` before the model spoke."""
        return next((message for message in reversed(self.messages) if message.role == "assistant"), None)

    def record_of(self, question: Question) -> CallRecord | None:
        """The record of the call that asked ``question``."""
        return next(
            (record for record in self.records.values() if any(held.id == question.id for held in record.questions)),
            None,
        )

    def __repr__(self) -> str:
        return f"<Chat {self.id} messages={len(self.messages)} waiting={self.waiting}>"

    # What the journal records and reads back

    async def _refresh(self) -> None:
        """Take in what other processes recorded since this chat object last looked (its current turn on)."""
        async with self._journal.refresh(tail_start(self.messages)) as changes:
            if changes is not None:
                self._apply(changes)

    def _apply(self, changes: Changes) -> None:
        """Make the chat what ``changes`` holds, keeping the records callers already hold; a state
        that cannot be loaded ([`CorruptStateError`][tarry.errors.CorruptStateError]) leaves the chat as it was."""
        take_in(changes, self.id, self.messages, self.records, self.tools)
        self.chat_questions = list(changes.chat_questions)

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
        seen: str | None = None,
    ) -> bool:
        """Record a decision through the journal and hold the question it leaves in place of ``question``; False when
        another came first.

        ``frees``: the chat carries on next, so a decision that frees a call may claim it, unless the chat
        must first load tools or wait on a question of its own (see ``record_decision``). ``seen``: the digest of the
        arguments the decider saw.
        """
        record = self.record_of(question)
        carries_on = frees and all(source.loaded for source in self._sources) and not self._waits_on_own_question()
        made = (decision, answer, note, by, channel)
        decided = await record_decision(self._journal, question, record, *made, carries_on=carries_on, seen=seen)
        if decided is not None and record is None:
            self.chat_questions = [decided if held.id == decided.id else held for held in self.chat_questions]
        return decided is not None

    # The loop

    def _loop(self) -> ChatLoop:
        """This chat's loop, for one run."""
        return ChatLoop(self, self._journal, self._sources, self._refresh)

    def _waits_on_own_question(self) -> bool:
        now = utcnow()
        return any(question.is_open(now) for question in self.chat_questions)

    async def _find(self, question: Question | str) -> Question:
        """This chat's question with the id of ``question``, read again from the journal if it is new here."""
        wanted = question_id(question)
        found = find_question(wanted, self.chat_questions, self.records.values())
        if found is None:
            await self._refresh()  # another process may have asked it since we last looked
            found = find_question(wanted, self.chat_questions, self.records.values())
        if found is None:
            raise UnknownQuestionError(f"This chat never asked question {wanted!r}")
        return found


def _check_options(max_concurrency: int, instructions: str | None) -> None:
    if isinstance(max_concurrency, bool) or not isinstance(max_concurrency, int) or max_concurrency < 1:
        raise ValueError(f"max_concurrency must be a positive int, got {max_concurrency!r}")
    if instructions is not None and not isinstance(instructions, str):
        raise TypeError(f"instructions must be str or None, got {type(instructions).__name__}")
