"""The model's turn: one request to the chat's model under the chat's turn, and the records of the calls it makes."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import Any

from tarry.approvals import Approval
from tarry.calls import CallRecord, mint
from tarry.edits import shown_as_ran
from tarry.errors import ClaimLostError, InvalidArgumentsError, PendingToolCallsError, TarryError
from tarry.journal import Journal
from tarry.live import LiveTurn, current_turn
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
)
from tarry.questions import Question
from tarry.text import unstorable
from tarry.tools import Tool
from tarry.tracing import mark, model_attributes, span, span_ids

logger = logging.getLogger("tarry")

CALL_KEY_LIMIT = 200
"""The longest tool call id or tool name a chat keeps (no tool's name is longer: providers allow 64 characters)."""


class ModelTurn:
    """One turn of the model in chat ``chat_id``: under the chat's turn, ask ``model`` once, then record its reply
    and the calls it makes in ``messages`` and ``records`` through ``journal``.

    ``look`` takes in what other processes recorded, and ``ready`` says whether the chat, as it
    then stands, needs the model (no call waits, the last message is not the model's).
    """

    def __init__(
        self,
        chat_id: str,
        model: Model,
        journal: Journal,
        messages: list[Message],
        records: dict[str, CallRecord],
        tools: Mapping[str, Tool],
        *,
        look: Callable[[], Awaitable[object]],
        ready: Callable[[], bool],
    ) -> None:
        self.chat_id = chat_id
        self.model = model
        self.journal = journal
        self.messages = messages
        self.records = records
        self.tools = tools
        self.look = look
        self.ready = ready

    async def take(
        self,
        stream: bool,
        instructions: str | None,
        tool_choice: ToolChoice | None,
        settings: Mapping[str, Any],
    ) -> AsyncIterator[StreamEvent]:
        """Take the turn unless another holds it, yielding the reply's events (with ``stream``) and, once the reply
        is recorded, [`MessageDone`][tarry.messages.MessageDone]; nothing when the chat no longer needs the model.
        """
        async with self.journal.hold_turn() as held:
            if not held:
                return
            await self.look()
            if not self.ready():
                return
            request = ModelRequest(
                messages=shown_as_ran(self.messages, self.records),
                tools=tuple(tool.schema() for tool in self.tools.values()),
                instructions=instructions,
                tool_choice=effective_tool_choice(tool_choice, self.messages),
                settings=dict(settings),
            )
            reply = None
            async for event in self._ask(request, stream, settings):
                if isinstance(event, MessageDone):
                    reply = event.message
                else:
                    yield event
            assert reply is not None
            if await self._record(reply):
                yield MessageDone(reply)

    async def _ask(
        self, request: ModelRequest, stream: bool, settings: Mapping[str, Any]
    ) -> AsyncIterator[StreamEvent]:
        """The model's reply to ``request``, traced: its events as they come (with ``stream``), then
        [`MessageDone`][tarry.messages.MessageDone] with it."""
        model = self.model
        attributes = model_attributes(model.name, self.chat_id, settings)
        with span(f"chat {attributes['gen_ai.request.model']}", attributes, client=True, current=False) as traced:
            reply = None
            if stream and isinstance(model, StreamingModel):
                async for event in model.stream(request):
                    if isinstance(event, MessageDone):
                        reply = event.message
                    else:
                        yield event
                if reply is None:
                    raise TarryError(f"The model {model.name} ended its stream without a message")
            else:
                live = current_turn.set(LiveTurn(self.chat_id, self.journal.start_run, self.journal.finish_run))
                try:
                    reply = await model.complete(request)
                finally:
                    current_turn.reset(live)
                if stream:
                    for event in _events_of(reply):
                        yield event
            if reply.usage is not None:
                usage = {"input_tokens": reply.usage.input_tokens, "output_tokens": reply.usage.output_tokens}
                traced.set({f"gen_ai.usage.{key}": value for key, value in usage.items()})
        yield MessageDone(reply)

    async def _record(self, reply: Message) -> bool:
        """Record ``reply`` and its calls' records; False when another process took the turn over meanwhile."""
        records = records_for(reply, self.records, self.tools, self.chat_id)
        try:
            await self.journal.append(reply, records)
        except ClaimLostError:
            logger.warning(
                "Lost the turn of chat %s while the model replied; another process took it over", self.chat_id
            )
            await self.look()
            return False
        self.messages.append(reply)
        for record in records:
            self.records[record.call.id] = record
            if record.needs_approval:
                ids = {"chat_id": self.chat_id, "call_id": record.call.id}
                waits_on = {"gen_ai.tool.name": record.call.name, "tarry.pause.reason": "approval"}
                mark(f"pause {record.call.name}", {**span_ids(ids), **waits_on})
        return True


def refuse_while_calls_wait(records: Iterable[CallRecord]) -> None:
    """Refuse a new user message ([`PendingToolCallsError`][tarry.errors.PendingToolCallsError]) while any of the
    calls of ``records`` is open, naming them."""
    waiting = [record.call.name for record in records if record.open]
    if waiting:
        raise PendingToolCallsError(
            f"{len(waiting)} tool call(s) still wait ({', '.join(waiting)}): answer, approve, decline "
            "or cancel them, and complete() the chat, before asking again"
        )


def _events_of(reply: Message) -> list[StreamEvent]:
    """The events a streamed ``reply`` would have yielded: its text, then each of its calls."""
    events: list[StreamEvent] = [TextDelta(reply.content)] if reply.content else []
    return events + [ToolCallEvent(call) for call in reply.tool_calls]


def effective_tool_choice(choice: ToolChoice | None, messages: list[Message]) -> ToolChoice | None:
    """The chat's tool ``choice``, or ``"auto"`` once a forcing choice made the model call a tool this turn."""
    if choice is None or choice in ("auto", "none"):
        return choice
    for message in reversed(messages):
        if message.role == "user":
            return choice
        if message.tool_calls:
            return "auto"
    return choice


def records_for(
    reply: Message, known: Mapping[str, CallRecord], tools: Mapping[str, Tool], chat_id: str
) -> list[CallRecord]:
    """The records of the calls ``reply`` makes, each with its approval question when its tool asks for one.

    Raises [`TarryError`][tarry.errors.TarryError] for a reply that is no assistant message, or that makes
    a call no chat could keep (an id used before, a key too long).
    """
    if reply.role != "assistant":
        raise TarryError(f"The model replied with a {reply.role!r} message, not an assistant one")
    records: list[CallRecord] = []
    for call in reply.tool_calls:
        if call.id in known or any(call.id == other.call.id for other in records):
            raise TarryError(f"The model reused the tool call id {call.id!r}")
        _check_call_keys(call)
        policy = _approval_of(call, tools)
        record = CallRecord(call, needs_approval=policy is not None)
        if policy is not None:
            asked = Question(
                id="",
                kind="approval",
                message=f"Approve the {call.name} call?",
                ttl=tools[call.name].approval_ttl,
                policy=None if policy == Approval() else policy,
                editable=_editable_of(tools[call.name]),
            )
            record.questions.append(mint(asked, call, chat_id))
        records.append(record)
    return records


def _approval_of(call: ToolCall, tools: Mapping[str, Tool]) -> Approval | None:
    tool = tools.get(call.name)
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


def _editable_of(tool: Tool) -> dict[str, Any] | None:
    try:
        return tool.editable_schema()
    except Exception:
        logger.exception("The editable parameters of %s are not its parameters; nobody may change its calls", tool.name)
        return None


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
