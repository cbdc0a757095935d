"""What a journal reads of a chat: the values a chat takes in, so no store row reaches the domain."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tarry.calls import CallRecord
from tarry.errors import CorruptStateError
from tarry.messages import Message, ToolCall
from tarry.questions import Question
from tarry.tasks import Task
from tarry.tools import Tool


@dataclass(frozen=True)
class CallChange:
    """One tool call as the journal read it."""

    call: ToolCall
    needs_approval: bool
    questions: tuple[Question, ...]
    """All the call's questions, oldest first."""
    state_changed: bool
    """The saved pause state changed since the chat last read it: the chat rebuilds the task from ``state``."""
    state: Mapping[str, Any] | None
    """The saved pause state ([`to_dict`][tarry.Task.to_dict]), or ``None`` when the call never paused."""
    waiting_on: frozenset[str]
    """The ids of the questions the call's paused task waits on."""
    result: Message | None = None
    """The call's result, one of the ``Changes.messages`` (``None`` while the call is open)."""


@dataclass(frozen=True)
class Changes:
    """What a chat holds from message ``start`` on, read by its journal.

    The chat takes them in: it keeps the records it already holds, and holds these questions
    (values) in place of the ones it held.
    """

    start: int
    messages: tuple[Message, ...]
    """The messages from position ``start`` on."""
    chat_questions: tuple[Question, ...] = ()
    """The chat's own questions (no call), oldest first."""
    calls: tuple[CallChange, ...] = ()
    """The calls of those messages, in the order the model made them."""


def rebuild_task(chat_id: str, call: ToolCall, state: Mapping[str, Any] | None, tool: Tool | None) -> Task | None:
    """The paused task ``state`` describes, rebuilt by ``tool`` (``Task.load`` when the tool is unknown).

    Raises [`CorruptStateError`][tarry.errors.CorruptStateError] naming the chat and the call when the state cannot be
    loaded.
    """
    if state is None:
        return None
    try:
        return tool.load_task(state, tool_call=call) if tool is not None else Task.load(state, tool_call=call)
    except Exception as error:
        raise CorruptStateError(
            f"The saved pause state of the {call.name} call {call.id} (chat {chat_id}) cannot be loaded: {error}",
            chat_id=chat_id,
            call_id=call.id,
        ) from error


def apply_call(record: CallRecord, change: CallChange, task: Task | None) -> None:
    """Bring ``record`` in line with ``change``; ``task`` is its rebuilt task when the state changed."""
    questions = [record.own(question) for question in change.questions]
    record.questions = questions
    record.needs_approval = change.needs_approval
    if change.state_changed:
        record.task = task
    if record.task is not None:
        record.task.questions = [question for question in questions if question.id in change.waiting_on]
    if change.result is not None:
        record.result = change.result


def take_in(
    changes: Changes, chat_id: str, messages: list[Message], records: dict[str, CallRecord], tools: Mapping[str, Tool]
) -> None:
    """Bring a chat's ``messages`` and call ``records`` in line with ``changes``, keeping the records callers already
    hold.

    The changed tasks are rebuilt first, so a state that cannot be loaded
    ([`CorruptStateError`][tarry.errors.CorruptStateError]) leaves both as they were.
    """
    tasks = {}
    for change in changes.calls:
        if change.state_changed:
            held = records.get(change.call.id)
            call = change.call if held is None else held.call
            tasks[call.id] = rebuild_task(chat_id, call, change.state, tools.get(call.name))
    messages[changes.start :] = changes.messages
    for change in changes.calls:
        record = records.get(change.call.id)
        if record is None:
            record = records[change.call.id] = CallRecord(change.call)
        apply_call(record, change, tasks.get(change.call.id))


def tail_start(messages: list[Message]) -> int:
    """Where a chat's current turn starts: its last assistant message (0 before the model spoke)."""
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].role == "assistant":
            return index
    return 0
