"""``Store``: chats saved in SQL, listed and answered from any process."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import socket
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from functools import partial
from types import TracebackType
from typing import Any, Literal

from sqlalchemy import Connection, select, update

from tarry.agents import Agent
from tarry.approvals import MayDecide, check_may_decide
from tarry.chat import Chat
from tarry.clock import utcnow
from tarry.decisions import check_seen, given_result
from tarry.edits import check_edit
from tarry.errors import (
    AmbiguousIdError,
    ChatNotFoundError,
    CorruptStateError,
    NotAllowedError,
    TarryError,
    UnknownGrantError,
    UnknownQuestionError,
)
from tarry.grants import Allow, Grant, constraints_of, expiry_of
from tarry.messages import Message, Model, ToolChoice
from tarry.principals import Channel, Principal, check_channel, principal_of
from tarry.questions import AnswerNeeded, Decision, Question, check_note
from tarry.running import sync_twin
from tarry.store.audit import DecisionEvent, TrailBreak, read_history, verify_trail
from tarry.store.cursor import fetch_all, fetch_value, run
from tarry.store.deciding import (
    AnswerOf,
    Attempt,
    ClaimAlong,
    Settled,
    decide_if_open,
    decide_question,
    decide_unread,
    decide_unread_together,
)
from tarry.store.engine import Database, Durability, database_url
from tarry.store.follow_ups import FollowedUp, any_due, sweep_one
from tarry.store.granting import grants_for, insert_grant, read_grants, revoke
from tarry.store.journal import CHAT_VERSION, INSERT_CHAT, StoreJournal, fetch_chat, fetch_tail
from tarry.store.listing import ChatSummary, list_chats
from tarry.store.oauth import OAuthRecords
from tarry.store.outbox import (
    DELIVERY_STATES,
    DeliveryRecord,
    DeliveryState,
    delivery_by_id,
    list_deliveries,
    retry_delivery,
)
from tarry.store.paging import QuestionPage, check_limit, decode_cursor, encode_cursor, pending_query, position_of
from tarry.store.problems import Problem, find_problems
from tarry.store.prune import PruneReport, prune_chats, vacuum_file
from tarry.store.rows import message_from_row, question_and_call_from_row, read_each
from tarry.store.schedule import wake
from tarry.store.slack import SlackMessage, new_slack_message, read_slack_messages, save_slack_message
from tarry.store.tables import LARGEST_ID, chats, questions, tool_calls
from tarry.store.together import DecisionsTogether
from tarry.store.turn import approve_turn, shown_digests
from tarry.store.waiting import WaitingTask, waiting_tasks
from tarry.tasks import Task
from tarry.text import unstorable
from tarry.tools import Tool, ToolSource
from tarry.tracing import decision_attributes, mark

logger = logging.getLogger("tarry.store")
DecisionHook = Callable[[Question], Awaitable[None] | None]
CancelHook = Callable[[str], Awaitable[None] | None]


class Store:
    """Chats kept in a SQL database, so any process can list what they wait on, answer, and carry them on.

    ``url`` is ``sqlite:///path`` or ``postgresql://…`` (default: ``TARRY_DATABASE_URL``, else
    the SQLite file ``tarry.db`` in the working directory). ``lease`` is how many seconds a
    claim on a call or a chat lasts without renewal; ``poll_interval`` how often a running call
    that waits for a person's answer looks for it. ``durability="full"`` (the default) makes
    every commit survive a power cut; ``"fast"`` lets the database skip the disk sync at each
    commit (SQLite ``synchronous=NORMAL``, PostgreSQL ``synchronous_commit=off``), so a power
    cut can undo the last commits, a claim among them. ``may_decide(principal, question) -> bool``
    says who may decide an approval whose [`Approval`][tarry.approvals.Approval] policy names ``by``
    (a plain function: it runs inside the decision's transaction; a coroutine function raises
    ``TypeError``, and only ``True`` admits). The store's engine belongs to the event
    loop that first uses it; use it as ``async with Store() as store:`` or call [`close`][tarry.store.Store.close].

    Synchronous code uses ``with Store() as store:`` and the ``_sync`` twin of each verb
    (``store.setup_sync()``, ``store.approve_sync(id)``, …), which run on one event loop per thread.

    Its first use checks the database's schema revision ([`check`][tarry.store.Store.check]); every database error
    is a [`StoreError`][tarry.errors.StoreError] that says what to do.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        lease: float = 60.0,
        poll_interval: float = 0.25,
        durability: Durability = "full",
        may_decide: MayDecide | None = None,
    ) -> None:
        for name, value in (("lease", lease), ("poll_interval", poll_interval)):
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
        self.poll_interval = float(poll_interval)
        """Seconds between two looks at the database while a running call waits for an answer."""
        self.db = Database(database_url(url), durability)
        """The database underneath, which runs each of the store's transactions (for tools and benchmarks)."""
        self.lease = float(lease)
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        """Who this store claims work as."""
        self.decision_hooks: list[DecisionHook] = []
        """Called with each question right after a decision on it is recorded through this store."""
        self.cancel_hooks: list[CancelHook] = []
        """Called with a chat's id right after [`cancel`][tarry.store.Store.cancel] recorded a cancellation request."""
        self.may_decide = may_decide
        self.oauth = OAuthRecords(self)
        """Logins to OAuth-protected MCP servers (tokens, registrations, codes), shared by every process."""
        self._together = DecisionsTogether(
            lambda attempt: self.db.run_direct(partial(decide_unread, attempt=attempt), write=True),
            lambda attempts: self.db.run_direct(partial(decide_unread_together, attempts=attempts), write=True),
        )
        """Approvals and declines by id on PostgreSQL: those that arrive while one is on its way go together."""
        self._reported: set[Problem] = set()

    @property
    def may_decide(self) -> MayDecide | None:
        """The application's check of who may decide a question whose approval policy names ``by``.

        A plain function returning a bool; setting a coroutine function (or anything not callable)
        raises ``TypeError``, as passing it to the constructor does.
        """
        return self._may_decide

    @may_decide.setter
    def may_decide(self, may_decide: MayDecide | None) -> None:
        self._may_decide = check_may_decide(may_decide)

    @property
    def url(self) -> str:
        """The database URL, without its password."""
        return self.db.url.render_as_string(hide_password=True)

    async def setup(self) -> None:
        """Create the schema, or migrate it to the current version (Alembic).

        A schema that a newer tarry migrated raises [`StoreSchemaError`][tarry.errors.StoreSchemaError].
        """
        await self.db.migrate()

    async def check(self) -> None:
        """Raise the [`StoreError`][tarry.errors.StoreError] that using this store would raise, if any.

        That is: the database cannot be reached, is damaged, or has no schema or one this tarry
        cannot use, or misses a table, column, index, unique constraint or (PostgreSQL) trigger of its
        revision (each one named). Every store checks the revision once, before it first reads or writes; call this to
        fail early, as ``tarry worker`` and ``tarry db check`` do before they start.
        """
        await self.db.check_schema()
        await self.db.check_complete()

    async def close(self) -> None:
        """Close the database connections."""
        await self.db.dispose()

    async def __aenter__(self) -> Store:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close_sync()

    # Chats

    async def create_chat(
        self,
        model: Model | str | None = None,
        tools: Iterable[Tool | ToolSource | Callable[..., Any]] = (),
        instructions: str | None = None,
        *,
        tool_choice: ToolChoice | None = None,
        settings: Mapping[str, Any] | None = None,
        max_concurrency: int = 8,
        agent: Agent | str | None = None,
    ) -> Chat:
        """A new chat whose every change is saved as it happens.

        With ``agent`` (an [`Agent`][tarry.Agent]), the chat takes the agent's model, tools and
        instructions unless given here, and records the agent's name so a worker can rebuild it.
        """
        chat, _, row = self._new_chat(model, tools, instructions, tool_choice, settings, max_concurrency, agent)
        await self.db.run_direct(lambda connection: run(connection, INSERT_CHAT, row), write=True)
        return chat

    async def start_chat(
        self,
        text: str,
        model: Model | str | None = None,
        tools: Iterable[Tool | ToolSource | Callable[..., Any]] = (),
        instructions: str | None = None,
        *,
        tool_choice: ToolChoice | None = None,
        settings: Mapping[str, Any] | None = None,
        max_concurrency: int = 8,
        agent: Agent | str | None = None,
    ) -> Chat:
        """A new chat that asks ``text`` at once: [`create_chat`][tarry.store.Store.create_chat], then
        [`Chat.ask`][tarry.Chat.ask], quicker.

        The chat and the user's message are saved together, before the model is called, so the
        chat is in the database from its first message on, and not at all when ``text`` is
        refused. Returns the chat as [`Chat.ask`][tarry.Chat.ask] leaves it (its reply is
        ``chat.last_reply``). An error after the chat is saved (the model's, say) carries a note
        naming the saved chat's id.
        """
        # One write fewer than create_chat and ask: the chat's row goes with its first message.
        chat, journal, row = self._new_chat(model, tools, instructions, tool_choice, settings, max_concurrency, agent)
        journal.save_with_first_message(row)
        try:
            await chat.ask(text)
        except BaseException as error:
            if not journal.unsaved:  # the caller never got the chat: say which one was saved
                error.add_note(f"Chat {chat.id} was saved with its first message; load_chat() carries it on.")
            raise
        return chat

    def _new_chat(
        self,
        model: Model | str | None,
        tools: Iterable[Tool | ToolSource | Callable[..., Any]],
        instructions: str | None,
        tool_choice: ToolChoice | None,
        settings: Mapping[str, Any] | None,
        max_concurrency: int,
        agent: Agent | str | None,
    ) -> tuple[Chat, StoreJournal, dict[str, Any]]:
        """A new chat object, its journal, and the row that saves it (at version 0)."""
        if isinstance(agent, Agent):
            model = model if model is not None else agent.make_model()
            tools = tools if tools else agent.tools
            instructions = instructions if instructions is not None else agent.instructions
            tool_choice = tool_choice if tool_choice is not None else agent.tool_choice
            settings = {**agent.settings, **(settings or {})}
            agent = agent.name
        chat_id = str(uuid.uuid4())
        journal = StoreJournal(self, chat_id, seen=0)
        chat = Chat(
            model,
            tools,
            instructions,
            tool_choice=tool_choice,
            settings=settings,
            max_concurrency=max_concurrency,
            id=chat_id,
            journal=journal,
        )
        row = {
            "id": chat.id,
            "model": chat.model.name if chat.model is not None else None,
            "agent": agent,
            "instructions": instructions,
            "tool_choice": tool_choice,
            "settings": chat.settings,
            "created_at": utcnow(),
            "version": 0,
            "message_count": 0,
            "schedule_version": 0,
        }
        return chat, journal, row

    async def load_chat(
        self,
        chat_id: str,
        model: Model | str | None = None,
        tools: Iterable[Tool | ToolSource | Callable[..., Any]] = (),
        instructions: str | None = None,
        *,
        max_concurrency: int = 8,
    ) -> Chat:
        """Rebuild a stored chat, read in one snapshot; ``complete()`` carries it on where it stopped.

        Without ``model`` the recorded ``"provider:model"`` is used when an installed provider
        knows it; without ``instructions`` the recorded ones are.
        """

        read = partial(fetch_chat, chat_id=chat_id, start=0)
        # the chat and all its rows, in one snapshot (one statement alone on PostgreSQL)
        row, tail = await (self.db.run_read(read) if self.db.is_sqlite else self.db.run_direct(read, write=False))
        if row is None:
            raise ChatNotFoundError(f"No chat has the id {chat_id!r}")
        chat = Chat(
            model if model is not None else _recorded_model(row["model"]),
            tools,
            instructions if instructions is not None else row["instructions"],
            tool_choice=row["tool_choice"],
            settings=row["settings"],
            max_concurrency=max_concurrency,
            id=chat_id,
            journal=StoreJournal(self, chat_id, loaded=(int(row["version"]), tail)),
        )
        if not tail.waits_on_own_question():  # else the chat waits for a login before its tools can be listed
            with contextlib.suppress(AnswerNeeded):  # complete() parks the chat on it
                await chat.load_tools()  # an MCP server's tools rebuild their own tasks
        await chat._refresh()  # takes in the rows read above, which its journal holds: no statement
        return chat

    async def list_chats(self, *, waiting: bool = False) -> list[ChatSummary]:
        """Every stored chat, oldest first, with what it waits on; only waiting ones with ``waiting=True``."""
        return await self.db.run_read(lambda connection: list_chats(connection, waiting=waiting))

    async def chat_summary(self, chat_id: str) -> ChatSummary:
        """One stored chat's summary; raises [`ChatNotFoundError`][tarry.errors.ChatNotFoundError] for an unknown id."""
        found = [] if unstorable(chat_id) else await self.db.run_read(lambda c: list_chats(c, chat_id=chat_id))
        if not found:
            raise ChatNotFoundError(f"No chat has the id {chat_id!r}")
        return found[0]

    async def messages(self, chat_id: str) -> list[Message]:
        """A stored chat's messages in order, read from the database alone (no model, no tools).

        Raises [`ChatNotFoundError`][tarry.errors.ChatNotFoundError] for an unknown id.
        """

        def read(connection: Connection) -> list[Message] | None:
            if connection.scalar(CHAT_VERSION, {"chat_id": chat_id}) is None:
                return None
            return [message_from_row(row) for row in fetch_tail(connection, chat_id, 0).messages]

        found = None if unstorable(chat_id) else await self.db.run_read(read)
        if found is None:
            raise ChatNotFoundError(f"No chat has the id {chat_id!r}")
        return found

    async def chat_version(self, chat_id: str) -> int:
        """A number that grows whenever anything about the chat is recorded: a message, a call, a question, a decision.

        Cheap enough to call often, to notice a change (a page that refreshes itself, say).
        Raises [`ChatNotFoundError`][tarry.errors.ChatNotFoundError] for an unknown id.
        """
        found = None
        if not unstorable(chat_id):  # no chat has such an id, and PostgreSQL refuses it in a query
            found = await self.db.run_direct(lambda c: fetch_value(c, CHAT_VERSION, {"chat_id": chat_id}), write=False)
        if found is None:
            raise ChatNotFoundError(f"No chat has the id {chat_id!r}")
        return int(found)

    # Questions and tasks, from the database alone

    async def pending_questions(
        self, chat_id: str | None = None, *, limit: int | None = None, cursor: str | None = None
    ) -> QuestionPage:
        """Undecided, unexpired questions of open calls, in the order the model made the calls.

        A chat's own questions (a login it needs before it can list an MCP server's tools; no
        ``tool_call``) come before every call's.

        Lists every chat's questions unless ``chat_id`` names one. ``limit`` makes it one page
        of at most that many; the page's ``next_cursor``, passed back as ``cursor``, gives the
        next one (``None`` after the last). A page takes as long however many questions were
        asked before it.
        """
        check_limit(limit)
        after = None if cursor is None else decode_cursor(cursor)
        if chat_id is not None and unstorable(chat_id):  # no chat has such an id, and PostgreSQL refuses it in a query
            return QuestionPage()
        query, parameters = pending_query(utcnow(), chat_id, None if limit is None else limit + 1, after)
        rows = await self.db.run_direct(lambda connection: fetch_all(connection, query, parameters), write=False)
        next_cursor = None
        if limit is not None and len(rows) > limit:
            rows = rows[:limit]
            next_cursor = encode_cursor(position_of(rows[-1]))
        skipped: list[CorruptStateError] = []
        found = read_each(rows, question_and_call_from_row, skipped)
        self._report(skipped)
        return QuestionPage(found, next_cursor)

    async def pending_tasks(self, chat_id: str | None = None) -> list[Task]:
        """Paused tasks of open calls that wait on no undecided question (all chats by default)."""
        return [waiting.task for waiting in await self.waiting_tasks(chat_id)]

    async def waiting_tasks(self, chat_id: str | None = None) -> list[WaitingTask]:
        """[`pending_tasks`][tarry.store.Store.pending_tasks] with their chat and since when they wait, for screens
        that list them."""
        if chat_id is not None and unstorable(chat_id):  # no chat has such an id
            return []
        skipped: list[CorruptStateError] = []
        found = await self.db.run_read(lambda connection: waiting_tasks(connection, chat_id, skipped))
        self._report(skipped)
        return found

    async def problems(self) -> list[Problem]:
        """The open tool calls whose saved records cannot be read, in every chat, oldest first.

        [`pending_questions`][tarry.store.Store.pending_questions] and
        [`pending_tasks`][tarry.store.Store.pending_tasks] leave such a call out (and log it once, naming its chat and
        call) so every other call stays listed; loading its chat raises
        [`CorruptStateError`][tarry.errors.CorruptStateError] naming the call. ``tarry db check`` prints them.
        """
        return await self.db.run_read(find_problems)

    def _report(self, skipped: list[CorruptStateError]) -> None:
        for problem in map(Problem.of, skipped):
            if problem not in self._reported:
                self._reported.add(problem)
                logger.warning(
                    "Left out of the listing: chat %s, call %s: %s", problem.chat_id, problem.call_id, problem.detail
                )

    async def question(self, question_id: str) -> Question:
        """One question by id, decided or not; raises [`UnknownQuestionError`][tarry.errors.UnknownQuestionError]."""
        query = _QUESTION_WITH_CALL.where(questions.c.id == _question_id(question_id))
        row = await self.db.run_alone(lambda c: c.execute(query).mappings().one_or_none(), write=False)
        if row is None:
            raise UnknownQuestionError(f"No question has the id {question_id!r}")
        return question_and_call_from_row(row)

    async def full_id(self, prefix: str, *, of: Literal["question", "chat"]) -> str:
        """The id of the one question (or chat) whose id starts with ``prefix``, as git takes a commit's.

        An id given whole is returned as it is. Raises [`UnknownQuestionError`][tarry.errors.UnknownQuestionError] (or
        [`ChatNotFoundError`][tarry.errors.ChatNotFoundError]) when none starts so, and
        [`AmbiguousIdError`][tarry.errors.AmbiguousIdError] naming the candidates when several do.
        """
        table = questions if of == "question" else chats
        not_found = UnknownQuestionError if of == "question" else ChatNotFoundError
        if len(prefix) == 36 or not prefix or unstorable(prefix):  # whole, or no id at all: the caller's read says so
            return prefix
        query = select(table.c.id).where(table.c.id.startswith(prefix, autoescape=True)).order_by(table.c.id).limit(5)
        found = await self.db.run_read(lambda connection: list(connection.scalars(query)))
        if not found:
            raise not_found(f"No {of} has an id starting with {prefix!r}")
        if len(found) > 1:
            more = ", ..." if len(found) == 5 else ""
            raise AmbiguousIdError(f"Several {of}s have an id starting with {prefix!r}: {', '.join(found)}{more}")
        return str(found[0])

    async def decide(
        self,
        question_id: str,
        decision: Literal["accept", "decline", "respond"],
        answer: Any = None,
        *,
        note: str | None = None,
        by: str | Principal | None = None,
        channel: Channel = "code",
        allow: Allow | None = None,
        arguments: Mapping[str, Any] | None = None,
        seen: str | None = None,
    ) -> Question | None:
        """Record ``decision`` on a question by id; returns the question as this decision left it, or ``None`` when
        another decision came first (or the question's call ended meanwhile).

        ``"accept"`` takes ``answer``: the values, as a mapping of field names to values (or the value of a
        one-field question), checked as [`Question.check_answer`][tarry.Question.check_answer] does; without it,
        the question is accepted as it stands (an approval, or a form's defaults). ``"decline"`` takes ``note``,
        which reaches the model. ``"respond"`` takes ``answer``: the result of the question's call, given in place
        of running its tool (any JSON value; ``None`` is JSON's null), recorded as ``{"result": answer}``; see
        [`respond`][tarry.store.Store.respond]. ``by`` says who decides, ``channel`` through what; both go to the
        question and the audit trail. The returned question is decided, or, under an
        [`Approval`][tarry.approvals.Approval] policy that needs several people, still undecided with this approval
        counted among its ``votes``.

        ``arguments`` (with ``"accept"`` of a call's approval) changes the call's arguments: parameter names to new
        values, applied to the arguments the question proposes now ([`Question.proposal`][tarry.Question.proposal])
        and checked against the parameters its tool lets a person change (``Question.editable``). The call then
        runs with them; see [`tarry.edits`][tarry.edits].

        ``seen`` (with ``"accept"`` or ``"respond"``) says which arguments the decider was shown: the
        [`proposal_digest`][tarry.Question.proposal_digest] of the question they saw. When the question proposes
        other arguments now (another person approved them changed meanwhile), nothing is recorded (the trail says
        ``refused``) and [`ProposalChangedError`][tarry.errors.ProposalChangedError] says what they are now. Without
        it, the decision is for the arguments the question proposes when it is recorded. A decline takes none.

        Raises [`UnknownQuestionError`][tarry.errors.UnknownQuestionError],
        [`InvalidAnswerError`][tarry.errors.InvalidAnswerError],
        [`QuestionExpiredError`][tarry.errors.QuestionExpiredError],
        [`ToolCallRunningError`][tarry.errors.ToolCallRunningError] (declining a call that runs) and
        [`NotAllowedError`][tarry.errors.NotAllowedError] (its approval policy refuses ``by``),
        [`ProposalChangedError`][tarry.errors.ProposalChangedError] (``seen``), as
        [`answer`][tarry.store.Store.answer], [`approve`][tarry.store.Store.approve] and
        [`decline`][tarry.store.Store.decline] do, and [`NotRespondableError`][tarry.errors.NotRespondableError]
        (``respond`` to anything but the approval a call waits on before it runs); ``ValueError`` for another
        decision, an answer to a decline or a note on an acceptance or a response.

        ``allow`` (an [`Allow`][tarry.grants.Allow], with ``"accept"`` of an approval only) also makes a standing
        grant for the call's tool in the same transaction, if this approval is recorded (decided or counted): see
        [`grant`][tarry.store.Store.grant]. With ``arguments`` too, the call runs as changed and the grant is for
        the tool's later calls, as ``allow``'s constraints say (whatever this call's changes).
        """
        seen = check_seen(seen)
        if decision == "decline":
            if answer is not None or arguments is not None:
                raise ValueError("A decline takes no answer or arguments; say why in its note")
            if seen is not None:
                raise ValueError("A decline takes no seen: it stops the call whatever its arguments are now")
            check_note(note)
            answer_of: AnswerOf = _no_answer
        elif decision in ("accept", "respond"):
            if note is not None:
                raise ValueError("A note goes with a decline only")
            if decision == "respond":
                if arguments is not None:
                    raise ValueError("A response takes no arguments: it gives the call's result in place of running it")
                answer_of = partial(_given, given_result(answer))
            elif arguments is not None:
                if answer is not None:
                    raise ValueError("An approval with changed arguments takes no answer")
                answer_of = partial(_edited, arguments)
            else:
                answer_of = _approval if answer is None else partial(_answered, answer)
        else:
            raise ValueError(f"A question is decided by id with 'accept', 'decline' or 'respond', got {decision!r}")
        if allow is not None:
            return await self._decide_and_grant(question_id, decision, answer_of, by, channel, allow, seen)
        # Without values to check, the decision needs no read of the question first (decide_unread); a response
        # needs its question read, to check that it is a call's approval.
        unread = answer is None and arguments is None and decision != "respond"
        settled = await self._decide(question_id, decision, answer_of, note, by, channel, unread=unread, seen=seen)
        return settled.question

    async def answer(
        self,
        question_id: str,
        value: Any = None,
        /,
        *,
        by: str | Principal | None = None,
        channel: Channel = "code",
        **values: Any,
    ) -> bool:
        """Answer a question by id; ``True`` when this call recorded the decision, ``False`` when another came first.

        Same arguments, validation and errors as [`tarry.Chat.answer`][tarry.Chat.answer]: ``by`` says who
        decides, ``channel`` through what; both go to the question and the audit trail. See
        [`decide`][tarry.store.Store.decide], which returns the question.
        """
        given = values if value is None else {**value, **values} if isinstance(value, Mapping) else value
        return await self.decide(question_id, "accept", given, by=by, channel=channel) is not None

    async def approve(
        self,
        question_id: str,
        *,
        arguments: Mapping[str, Any] | None = None,
        by: str | Principal | None = None,
        channel: Channel = "code",
        allow: Allow | None = None,
        seen: str | None = None,
    ) -> bool:
        """Approve a question by id; see [`answer`][tarry.store.Store.answer].

        With an [`Approval`][tarry.approvals.Approval] policy that needs several people, ``True``
        means this approval was counted; the question stays listed until enough people approved.
        ``allow`` also makes a standing grant, in the same transaction ("approve, and allow this for this chat
        for an hour": ``allow=Allow("chat", ttl=3600)``); see [`decide`][tarry.store.Store.decide].
        ``arguments`` changes the call's arguments as it approves them (see [`decide`][tarry.store.Store.decide]);
        with ``allow`` too, the grant is for the tool's later calls as ``allow`` says, whatever this one's changes.
        ``seen``, the [`proposal_digest`][tarry.Question.proposal_digest] of the question as the approver saw it,
        refuses the approval if the arguments changed since
        ([`ProposalChangedError`][tarry.errors.ProposalChangedError]).
        """
        decided = await self.decide(
            question_id, "accept", arguments=arguments, by=by, channel=channel, allow=allow, seen=seen
        )
        return decided is not None

    async def decline(
        self,
        question_id: str,
        note: str | None = None,
        *,
        by: str | Principal | None = None,
        channel: Channel = "code",
    ) -> bool:
        """Decline a question by id; the note reaches the model.

        Raises [`ToolCallRunningError`][tarry.errors.ToolCallRunningError] while the question's call runs.
        """
        return await self.decide(question_id, "decline", note=note, by=by, channel=channel) is not None

    async def respond(
        self,
        question_id: str,
        result: Any,
        *,
        by: str | Principal | None = None,
        channel: Channel = "code",
        seen: str | None = None,
    ) -> Question | None:
        """Answer a call's approval by id with the call's result, given in place of running the tool.

        The tool never runs: carrying the chat on closes the call with ``result`` (any JSON value), marked for the
        model as given by a person. Returns the question as this decision left it (decision ``"respond"``, answer
        ``{"result": result}``), or ``None`` when another decision came first. It needs what a decline needs of the
        approval's policy. Raises [`NotRespondableError`][tarry.errors.NotRespondableError] for any question but the
        approval a call waits on before it runs, recording nothing; else as [`decide`][tarry.store.Store.decide].
        ``seen`` refuses the response when the call's arguments changed since, as
        [`approve`][tarry.store.Store.approve]'s does.
        """
        return await self.decide(question_id, "respond", result, by=by, channel=channel, seen=seen)

    async def approve_all(
        self,
        chat_id: str,
        *,
        by: str | Principal | None = None,
        channel: Channel = "code",
        seen: Mapping[str, str] | None = None,
    ) -> list[Question]:
        """Approve every question the chat's waiting calls wait on, all in one transaction or none of them.

        The whole turn at once: each question is decided as [`approve`][tarry.store.Store.approve] decides one,
        by the same rules and approval policy, each with its own row on the audit trail, and the decision
        hooks run for each once all are recorded. If one of them cannot be decided, none is, nothing goes on
        the trail, and [`NotDecidableError`][tarry.errors.NotDecidableError] names that question (its
        ``question_id``, and its call's tool in the message). Its ``reason`` is the refusal approving that
        question alone would get ([`QuestionExpiredError`][tarry.errors.QuestionExpiredError], or
        [`NotAllowedError`][tarry.errors.NotAllowedError] when its policy refuses ``by``), or ``None`` for a form to
        fill in or a link to open, and for an approval whose policy needs more people, which this approval would
        only count (approve it on its own to count it).

        ``seen`` says what the approver was shown: each question's id to its
        [`proposal_digest`][tarry.Question.proposal_digest] as shown (``{question.id: question.proposal_digest}`` for
        the questions listed). Each approval is then checked as [`approve`][tarry.store.Store.approve]'s ``seen`` is:
        when a question proposes other arguments now, nothing is recorded and ``NotDecidableError`` names it, its
        ``reason`` a [`ProposalChangedError`][tarry.errors.ProposalChangedError]. A question of the turn missing from
        ``seen`` (asked since it was read) stops the turn too (``reason`` ``None``); ids of questions decided
        meanwhile are left out of it, and an id that is no question of the chat raises ``ValueError``.

        Returns the decided questions in id order; an empty list when no call of the chat waits on a question.
        A chat's own questions (a login before any call) are left alone. Raises
        [`ChatNotFoundError`][tarry.errors.ChatNotFoundError] for an unknown chat.
        """
        if not isinstance(chat_id, str) or unstorable(chat_id):  # no chat has such an id
            raise ChatNotFoundError(f"No chat has the id {chat_id!r}")
        shown = shown_digests(seen)
        work = partial(approve_turn, chat_id=chat_id, by=principal_of(by), channel=check_channel(channel), seen=shown)
        decided = await self.db.run_write(
            partial(work, may_decide=self.may_decide), may_block=self.may_decide is not None
        )
        approved: list[Question] = []
        for settled in decided:
            await self._announce(settled, "accept")
            assert settled.question is not None  # approve_turn returns decided questions only
            approved.append(settled.question)
        return approved

    async def history(
        self,
        chat_id: str | None = None,
        question_id: str | None = None,
        *,
        after: int | None = None,
        limit: int | None = None,
    ) -> list[DecisionEvent]:
        """The audit trail, oldest first: every attempt to decide a question, also the ones that lost.

        Narrowed to one chat or one question when named; ``after`` (an event's ``id``) and
        ``limit`` page through it.
        """
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise ValueError(f"limit must be a positive int or None, got {limit!r}")
        if after is not None and (isinstance(after, bool) or not isinstance(after, int) or after < 0):
            raise ValueError(f"after must be an event id (an int of 0 or more) or None, got {after!r}")
        if any(value is not None and unstorable(value) for value in (chat_id, question_id)):
            return []  # no id holds one, and PostgreSQL refuses it in a query
        if after is not None and after >= LARGEST_ID:
            return []  # no event comes after it, and the databases refuse a larger number
        limit = None if limit is None else min(limit, LARGEST_ID)
        return await self.db.run_read(lambda connection: read_history(connection, chat_id, question_id, after, limit))

    async def verify_trail(self) -> TrailBreak | None:
        """Check the audit trail's hash chains: the first place where it is not as tarry wrote it (a row changed,
        removed or inserted by anything but tarry), or ``None`` when the whole trail is intact.

        The trail is several chains (lanes), a chat's events all in one. Each event's hash covers
        its content, its place and the hash of the event before it in its lane, so a change
        anywhere shows at that event. A lane's newest events removed leave no gap to find: compare
        each lane's last [`DecisionEvent.hash`][tarry.store.DecisionEvent.hash] with one kept
        elsewhere (``tarry history --jsonl`` sends the trail to a log system); on PostgreSQL the
        trail's trigger refuses to remove rows.
        """
        return await self.db.run_read(verify_trail)

    async def _decide(
        self,
        question_id: str,
        decision: Decision,
        answer_of: AnswerOf,
        note: str | None,
        by: str | Principal | None,
        channel: Channel,
        known: Question | None = None,
        *,
        unread: bool = False,
        claim: ClaimAlong | None = None,
        on_claimed: Callable[[], None] | None = None,
        grant: str | None = None,
        seen: str | None = None,
    ) -> Settled:
        """Record a decision (``decide_question``), log it and run the decision hooks.

        ``known``: the question as a chat object holds it, which spares PostgreSQL's common case its read.
        ``unread``: an approval or a decline, whose answer needs no fields, which spares it too
        (``decide_unread``). ``claim``: the decision's statement may also claim
        the question's call (``ClaimAlong``); when it did, ``on_claimed``
        is called as the statement ends, before the hooks run (a cancelled caller's too), so the claim is
        kept from then on. ``grant``: the id of the standing grant that decides, through the ``grant`` channel.
        ``seen``: the digest of the arguments the decider saw (the rule ``changed``).

        Returns what the attempt came to: the question as it left it (decided, or one more
        approval counted; ``None`` when another decision came first) and the versions it wrote;
        raises the refusal the trail recorded.
        """
        through: Channel = "grant" if grant is not None else check_channel(channel)
        attempt = Attempt(_question_id(question_id), decision, answer_of, note, principal_of(by), through, grant, seen)
        settled = None
        if not self.db.is_sqlite:  # the common case in one or two statements, without BEGIN and COMMIT
            if unread and known is None:
                at_once = self._together.decide(attempt)
            else:
                decide = partial(decide_if_open, attempt=attempt, known=known, claim=claim)
                at_once = asyncio.ensure_future(self.db.run_direct(decide, write=True))
            if on_claimed is not None:  # told as the statement ends, however often the caller is cancelled meanwhile
                at_once.add_done_callback(partial(_tell_claimed, on_claimed))
            try:
                settled = await asyncio.shield(at_once)
            except asyncio.CancelledError:  # its statement commits all the same: a decision it recorded is announced
                await _announce_when_done(at_once, partial(self._announce, decision=decision))
                raise
        if settled is None and self.db.is_sqlite and claim is not None:  # the claim rides in the decision's transaction
            work = partial(decide_question, attempt=attempt, may_decide=self.may_decide, postgres=False, claim=claim)
            locked: asyncio.Future[Settled | None] = asyncio.ensure_future(
                self.db.run_write(work, may_block=self.may_decide is not None)
            )
            if on_claimed is not None:
                locked.add_done_callback(partial(_tell_claimed, on_claimed))
            try:
                settled = await asyncio.shield(locked)
            except asyncio.CancelledError:
                await _announce_when_done(locked, partial(self._announce, decision=decision))
                raise
        if settled is None:
            work = partial(decide_question, attempt=attempt, may_decide=self.may_decide, postgres=not self.db.is_sqlite)
            settled = await self.db.run_write(work, may_block=self.may_decide is not None)
        return await self._announce(settled, decision)

    async def _announce(self, settled: Settled, decision: Decision) -> Settled:
        """Raise the refusal the trail recorded, or log what the attempt came to and run the decision hooks."""
        if settled.refusal is not None:
            raise settled.refusal
        question = settled.question
        if question is None:
            return settled
        call_id = question.tool_call.id if question.tool_call is not None else None
        ids = {"chat_id": question.chat_id, "call_id": call_id, "question_id": question.id}
        if question.decision is None:
            who = question.votes[-1].principal.label
            logger.info(
                "Counted an approval of question %s of chat %s by %s", question.id, question.chat_id, who, extra=ids
            )
            return settled
        who = "nobody known" if question.decided_by is None else question.decided_by.label
        logger.info(
            "Recorded %s on question %s of chat %s by %s", decision, question.id, question.chat_id, who, extra=ids
        )
        mark(f"decision {decision}", decision_attributes(question))
        await self._run_hooks(question)
        return settled

    # An approval policy's follow-ups

    async def sweep_reminders(self, *, limit: int = 100) -> list[FollowedUp]:
        """Record the reminders, escalations and declines on timeout that approval policies made due
        ([`Approval`][tarry.approvals.Approval] ``remind_after``, ``escalate_after``, ``on_timeout``); returns them.

        Each question is one transaction, at most ``limit`` of them per call: its follow-ups are recorded on it
        (``Question.reminded_at``, ``escalated_at``, or a decline by nobody through the channel ``policy``) and on the
        trail, each once, whatever number of processes sweep at the same time (on PostgreSQL a question another one
        holds is skipped). A worker ([`tarry.jobs.Worker`][tarry.jobs.Worker], Celery's ``tarry.sweep_reminders``)
        calls it as it runs; a decline wakes the chat, which carries on as after any decline.
        """
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"limit must be a positive int, got {limit!r}")
        work = partial(sweep_one, postgres=not self.db.is_sqlite)
        done: list[FollowedUp] = []
        if not await self.db.run_read(any_due):
            return done
        for _ in range(limit):
            found = await self.db.run_write(work)
            if found is None:
                break
            done += found
        for item in done:
            question = item.question
            ids = {"chat_id": question.chat_id, "question_id": question.id}
            what, where = item.what, question.chat_id
            logger.info("Approval policy: %s on question %s of chat %s", what, question.id, where, extra=ids)
            if item.what == "decline":
                await self._run_hooks(question)
        return done

    # Standing grants

    async def grant(
        self,
        tool: str,
        *,
        by: str | Principal,
        chat_id: str | None = None,
        agent: str | None = None,
        equal: Mapping[str, Any] | None = None,
        within: Mapping[str, tuple[float | None, float | None]] | None = None,
        ttl: float | None = None,
        expires_at: datetime | None = None,
    ) -> Grant:
        """Make a standing grant: calls of ``tool`` are approved at once, as ``by``, through the ``grant`` channel.

        Its scope is one chat (``chat_id``), the chats of one agent (``agent``), or every chat (neither).
        ``equal`` (argument name to a JSON value) and ``within`` (argument name to ``(min, max)``, ``None`` for an
        open end) constrain the arguments of the calls it approves. It ends ``ttl`` seconds from now, at
        ``expires_at``, or (neither) when revoked ([`revoke_grant`][tarry.store.Store.revoke_grant]).

        A stored chat whose model makes a matching call records its approval question and decides it at once,
        by the same rules as any decision: the call's [`Approval`][tarry.approvals.Approval] policy must admit
        ``by`` (else the attempt is refused on the trail and the call waits for a person), and under a policy that
        needs several people the grant counts as one approval unless the policy says ``grant_suffices``.
        A grant needs a verified ``by``: a self-declared name cannot grant
        ([`NotAllowedError`][tarry.errors.NotAllowedError]). Raises ``ValueError`` for bad constraints, a scope of
        both a chat and an agent, or an expiry in the past, and
        [`ChatNotFoundError`][tarry.errors.ChatNotFoundError] for an unknown ``chat_id``.
        """
        granter = _granter(by)
        now = utcnow()
        made = Grant(
            str(uuid.uuid4()),
            tool,
            granter,
            now,
            constraints_of(equal, within),
            chat_id=chat_id,
            agent=agent,
            expires_at=expiry_of(now, ttl, expires_at),
        )
        if chat_id is not None and unstorable(chat_id):
            raise ChatNotFoundError(f"No chat has the id {chat_id!r}")

        def write(connection: Connection) -> None:
            if chat_id is not None and connection.scalar(select(chats.c.id).where(chats.c.id == chat_id)) is None:
                raise ChatNotFoundError(f"No chat has the id {chat_id!r}")
            insert_grant(connection, made)

        await self.db.run_write(write)
        logger.info("Granted %s calls (%s) by %s as grant %s", tool, made.scope, granter.label, made.id)
        return made

    async def grants(self, *, include_ended: bool = False) -> list[Grant]:
        """The standing grants, oldest first: those that apply now (neither revoked nor expired), or all of them
        with ``include_ended``."""
        live_at = None if include_ended else utcnow()
        return await self.db.run_read(lambda connection: read_grants(connection, live_at=live_at))

    async def revoke_grant(self, grant_id: str, *, by: str | Principal) -> Grant:
        """Revoke a standing grant by id, as ``by``; it approves nothing from then on. Returns the grant as it now
        stands: revoking one revoked already changes nothing (the first revocation stands).

        Raises [`UnknownGrantError`][tarry.errors.UnknownGrantError] for an unknown id.
        """
        revoker = principal_of(by)
        if revoker is None:
            raise ValueError("Revoking a grant needs to know who revokes it (by=...)")
        if not isinstance(grant_id, str) or unstorable(grant_id):
            raise UnknownGrantError(f"No grant has the id {grant_id!r}")
        revoked = await self.db.run_write(partial(revoke, grant_id=grant_id, by=revoker, at=utcnow()))
        logger.info("Revoked grant %s of %s calls by %s", revoked.id, revoked.tool, revoker.label)
        return revoked

    async def save_slack_message(self, question_id: str, *, delivery_id: str, channel: str, ts: str) -> bool:
        """Record that ``delivery_id`` posted a Slack message about ``question_id``, to the Slack ``channel`` (a
        conversation id) at ``ts``; returns ``False`` when that delivery's message was recorded already (the first
        record stands).

        The Slack sender ([`SlackSender`][tarry.web.slack.SlackSender]) calls it; later notices of the question
        update every message [`slack_messages`][tarry.store.Store.slack_messages] lists. Raises
        [`UnknownQuestionError`][tarry.errors.UnknownQuestionError] for an unknown question, ``ValueError`` for an
        empty ``delivery_id``, ``channel`` or ``ts``.
        """
        question_id = _question_id(question_id)
        message = new_slack_message(delivery_id, question_id, channel, ts)

        def write(connection: Connection) -> bool:
            if connection.scalar(select(questions.c.id).where(questions.c.id == question_id)) is None:
                raise UnknownQuestionError(f"No question has the id {question_id!r}")
            return save_slack_message(connection, message)

        return await self.db.run_write(write)

    async def slack_messages(self, question_id: str) -> list[SlackMessage]:
        """The Slack messages posted about a question, oldest first (none for an unknown question)."""
        try:
            question_id = _question_id(question_id)
        except UnknownQuestionError:
            return []
        return await self.db.run_read(lambda connection: read_slack_messages(connection, question_id))

    async def _decide_and_grant(
        self,
        question_id: str,
        decision: Decision,
        answer_of: AnswerOf,
        by: str | Principal | None,
        channel: Channel,
        allow: Allow,
        seen: str | None = None,
    ) -> Question | None:
        """Approve a question under its row lock and, if the approval is recorded, make the grant ``allow`` says,
        in one transaction."""
        if decision != "accept" or not isinstance(allow, Allow):
            raise ValueError("A grant goes with an approval: decide(..., 'accept', allow=Allow(...))")
        granter = _granter(by)
        attempt = Attempt(
            _question_id(question_id), decision, answer_of, None, granter, check_channel(channel), seen=seen
        )
        postgres = not self.db.is_sqlite

        def write(connection: Connection) -> Settled:
            settled = decide_question(connection, attempt, self.may_decide, postgres=postgres)
            if settled.refusal is None and settled.question is not None:
                insert_grant(connection, _allowed(connection, settled.question, granter, allow))
            return settled

        settled = await self.db.run_write(write, may_block=self.may_decide is not None)
        return (await self._announce(settled, decision)).question

    async def _apply_grants(self, chat_id: str, asked: Sequence[Question]) -> bool:
        """Decide each of ``asked`` (approvals a chat has just recorded) that a live grant matches, as its granter
        through the ``grant`` channel; whether any was decided or counted. A grant is matched against the call as the
        approval proposes it ([`Question.proposal`][tarry.Question.proposal]): for an approval asked again of a call
        a person changed, the call as changed.

        The grants are tried oldest first until one's attempt is recorded: one refused (its policy does not
        admit the granter, say) is on the trail, and the call waits for a person if no other grant approves it.
        """
        now = utcnow()
        tools = {question.tool_call.name for question in asked if question.tool_call is not None}
        look = partial(grants_for, chat_id=chat_id, tools=tools, now=now)
        agent, found = await self.db.run_direct(look, write=False)  # one statement, no transaction
        recorded = False
        for question in asked:
            call = question.tool_call
            if call is not None and question.proposal is not None:  # the call as it would run: as a person changed it
                call = replace(call, arguments=question.proposal)
            for grant in [grant for grant in found if call is not None and grant.matches(call, chat_id, agent, now)]:
                try:
                    settled = await self._decide(
                        question.id, "accept", _approval, None, grant.granted_by, "grant", question, grant=grant.id
                    )
                except TarryError as error:  # refused or expired: on the trail already
                    logger.warning("Grant %s did not approve question %s: %s", grant.id, question.id, error)
                    continue
                recorded = recorded or settled.question is not None
                break
        return recorded

    async def cancel(self, chat_id: str) -> bool:
        """Ask whichever process carries the chat on to cancel it; returns ``False`` when it was already asked.

        The request is saved on the chat and wakes it: a worker (``tarry.jobs``) sees it at its
        next checkpoint (within a second), cancels the chat's tasks (``Task.cancel()``) and closes
        every waiting call with a cancelled result, and calls the model no more until the user
        asks again. Raises [`ChatNotFoundError`][tarry.errors.ChatNotFoundError] for an unknown chat.
        """
        postgres = not self.db.is_sqlite

        def write(connection: Connection) -> bool:
            row = connection.execute(
                select(chats.c.cancel_requested_at).where(chats.c.id == chat_id).with_for_update(key_share=True)
            ).one_or_none()
            if row is None:
                raise ChatNotFoundError(f"No chat has the id {chat_id!r}")
            if row.cancel_requested_at is not None:
                return False
            connection.execute(update(chats).where(chats.c.id == chat_id).values(cancel_requested_at=utcnow()))
            wake(connection, chat_id, postgres=postgres)
            return True

        if not await self.db.run_write(write):
            return False
        await _call_hooks(self.cancel_hooks, chat_id, f"cancel hook for chat {chat_id}")
        return True

    # Retention

    async def prune(
        self,
        *,
        finished_before: datetime,
        batch_size: int = 500,
    ) -> PruneReport:
        """Remove the chats that finished before ``finished_before``, with everything they own; returns what went.

        Finished and cancelled chats go with their messages, calls, questions and served MCP tasks.
        A chat that still waits (an open call or question), works (a claimed call or turn, a worker
        looking at it) or is due for the model's turn is never touched, nor one active at or after
        ``finished_before`` (an aware datetime, not in the future). Each batch of ``batch_size``
        chats is one short transaction that checks each chat again under its row's lock, so a chat a
        process touches meanwhile stays whole (``PruneReport.skipped``).

        The audit trail of the chats stays: it is append-only and tamper-evident (see
        [`verify_trail`][tarry.store.Store.verify_trail]), and its rows name the chat by id.
        ``tarry history --jsonl`` sends it to a log system.
        On SQLite the freed pages go back to the file system when the file has
        ``auto_vacuum=INCREMENTAL`` (new databases do); see [`vacuum`][tarry.store.Store.vacuum].
        """
        return await prune_chats(self, finished_before, batch_size=batch_size)

    async def vacuum(self) -> None:
        """SQLite: rewrite the database's file without its free pages, and switch it to ``auto_vacuum=INCREMENTAL``
        so that later prunes give their space back by themselves. It takes the database for itself while it
        runs and needs free disk space about the size of the file. Does nothing on PostgreSQL."""
        await vacuum_file(self)

    # Notifications

    async def deliveries(
        self, *, state: DeliveryState | None = None, question_id: str | None = None, limit: int = 100
    ) -> list[DeliveryRecord]:
        """The deliveries of notices, newest first: each one's channel, recipient, state (``pending``, ``sent`` or
        ``failed``), attempts and last error; all, or those in ``state``, or of one question (see
        docs/notifications.md)."""
        if state is not None and state not in DELIVERY_STATES:
            raise ValueError(f"state must be one of {', '.join(DELIVERY_STATES)}, got {state!r}")
        check_limit(limit)
        return await self.db.run_read(partial(list_deliveries, state=state, question_id=question_id, limit=limit))

    async def delivery(self, delivery_id: str) -> DeliveryRecord | None:
        """The delivery of ``delivery_id``, or ``None`` when no delivery has it."""
        return await self.db.run_read(lambda connection: delivery_by_id(connection, delivery_id))

    async def retry_delivery(self, delivery_id: str) -> DeliveryRecord:
        """Make a delivery that failed (or waits for its next attempt) due now, with a fresh count of attempts; a
        notifier sends it at its next round. A delivery already sent stays as it is. Raises
        [`UnknownDeliveryError`][tarry.errors.UnknownDeliveryError] for an unknown id."""
        now = utcnow()
        return await self.db.run_write(lambda connection: retry_delivery(connection, delivery_id, now))

    setup_sync = sync_twin(setup)
    close_sync = sync_twin(close)
    create_chat_sync = sync_twin(create_chat)
    start_chat_sync = sync_twin(start_chat)
    load_chat_sync = sync_twin(load_chat)
    pending_questions_sync = sync_twin(pending_questions)
    pending_tasks_sync = sync_twin(pending_tasks)
    question_sync = sync_twin(question)
    decide_sync = sync_twin(decide)
    answer_sync = sync_twin(answer)
    approve_sync = sync_twin(approve)
    decline_sync = sync_twin(decline)
    respond_sync = sync_twin(respond)
    approve_all_sync = sync_twin(approve_all)
    history_sync = sync_twin(history)
    messages_sync = sync_twin(messages)
    chat_version_sync = sync_twin(chat_version)
    cancel_sync = sync_twin(cancel)
    grant_sync = sync_twin(grant)
    grants_sync = sync_twin(grants)
    revoke_grant_sync = sync_twin(revoke_grant)
    save_slack_message_sync = sync_twin(save_slack_message)
    slack_messages_sync = sync_twin(slack_messages)
    prune_sync = sync_twin(prune)
    sweep_reminders_sync = sync_twin(sweep_reminders)
    vacuum_sync = sync_twin(vacuum)
    deliveries_sync = sync_twin(deliveries)
    delivery_sync = sync_twin(delivery)
    retry_delivery_sync = sync_twin(retry_delivery)

    async def _run_hooks(self, question: Question) -> None:
        await _call_hooks(self.decision_hooks, question, f"decision hook for question {question.id}")


async def _announce_when_done(
    at_once: asyncio.Future[Settled | None], announce: Callable[[Settled], Awaitable[Settled]]
) -> None:
    """For a caller cancelled while its decision's statement runs: wait for the statement however often the caller
    is cancelled again meanwhile, then ``announce`` a decision it recorded (its errors are the statement's)."""
    while not at_once.done():
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(at_once)
    if at_once.cancelled() or at_once.exception() is not None:
        return
    recorded = at_once.result()
    if recorded is not None:
        with contextlib.suppress(Exception):
            await announce(recorded)


async def _call_hooks(hooks: Iterable[Callable[[Any], Awaitable[None] | None]], argument: Any, what: str) -> None:
    """Call each hook with ``argument`` (awaiting those that are async); a failing one is logged, not raised."""
    for hook in hooks:
        try:
            outcome = hook(argument)
            if inspect.isawaitable(outcome):
                await outcome
        except Exception:
            logger.exception("A %s failed", what)


_QUESTION_WITH_CALL = select(questions, tool_calls.c.call_id, tool_calls.c.name, tool_calls.c.arguments).outerjoin(
    tool_calls, questions.c.tool_call_id == tool_calls.c.id
)
"""Questions with their call's id, name and arguments (``None`` for a chat's own questions)."""


def _granter(by: str | Principal | None) -> Principal:
    """The principal ``by`` names, who may make a standing grant: known and verified."""
    granter = principal_of(by)
    if granter is None:
        raise ValueError("A grant needs to know who grants it (by=...)")
    if not granter.verified:
        raise NotAllowedError(
            f"{granter.label} is a self-declared name that nobody checked: a standing grant approves calls as its "
            "granter, so it needs a verified identity"
        )
    return granter


def _allowed(connection: Connection, question: Question, granter: Principal, allow: Allow) -> Grant:
    """The grant ``allow`` makes along with ``granter``'s approval of ``question`` (read in ``connection``)."""
    call = question.tool_call
    if question.kind != "approval" or call is None:
        raise ValueError(f"Question {question.id} is no call's approval: only an approval can make a grant")
    agent = None
    if allow.scope == "agent":
        agent = connection.scalar(select(chats.c.agent).where(chats.c.id == question.chat_id))
        if agent is None:
            raise ValueError(f"Chat {question.chat_id} records no agent: a grant for its agent has none to name")
    now = utcnow()
    return Grant(
        str(uuid.uuid4()),
        call.name,
        granter,
        now,
        constraints_of(allow.equal, allow.within),
        chat_id=question.chat_id if allow.scope == "chat" else None,
        agent=agent,
        expires_at=expiry_of(now, allow.ttl, None),
        question_id=question.id,
    )


def _approval(question: Question) -> dict[str, Any]:
    return question.check_answer()


def _answered(answer: Any, question: Question) -> dict[str, Any]:
    return question.check_answer(answer)


def _edited(arguments: Mapping[str, Any], question: Question) -> dict[str, Any]:
    return check_edit(question, arguments)


def _no_answer(question: Question) -> None:
    return None


def _given(given: dict[str, Any], question: Question) -> dict[str, Any]:
    return given


def _question_id(question_id: object) -> str:
    if isinstance(question_id, Question):
        return question_id.id
    if not isinstance(question_id, str):
        raise UnknownQuestionError(f"A question id is a str, got {question_id!r}")
    if unstorable(question_id):  # no id holds one, and PostgreSQL refuses it in a query
        raise UnknownQuestionError(f"No question has the id {question_id!r}")
    return question_id


def _recorded_model(name: str | None) -> Model | str | None:
    if name is None:
        return None
    from tarry.providers import resolve_model

    try:
        return resolve_model(name)
    except ValueError:
        return None


def _tell_claimed(on_claimed: Callable[[], None], done: asyncio.Future[Settled | None]) -> None:
    """Call ``on_claimed`` if the decision's statement ``done`` claimed the question's call too."""
    if not done.cancelled() and done.exception() is None:
        settled = done.result()
        if settled is not None and settled.claimed:
            on_claimed()
