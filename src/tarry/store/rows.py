"""Turning domain objects into rows and rows back into domain objects."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from tarry.approvals import Approval, Vote
from tarry.calls import CallRecord
from tarry.changes import rebuild_task
from tarry.errors import CorruptStateError
from tarry.follow_ups import next_at
from tarry.messages import Message, ToolCall, Usage
from tarry.principals import Channel, Principal
from tarry.questions import QUESTION_KINDS, Question, Verdict, fields_from_schema
from tarry.store.engine import UnreadableJson
from tarry.store.tables import Json, metadata
from tarry.store.text import read_text, stored_text
from tarry.tasks import Task

Row = Mapping[Any, Any]
"""A database row as a mapping of column names to values."""
T = TypeVar("T")
_UNREADABLE = (ValueError, TypeError, KeyError, AttributeError)
"""What reading a tampered value raises; any of them makes the record corrupt."""


def read_each(rows: Iterable[Row], read: Callable[[Row], T], skipped: list[CorruptStateError]) -> list[T]:
    """``read`` of every row that can be read; the [`CorruptStateError`][tarry.errors.CorruptStateError] of each other
    one goes to ``skipped``."""
    found = []
    for row in rows:
        try:
            found.append(read(row))
        except CorruptStateError as error:
            skipped.append(error)
    return found


_JSON_COLUMNS = {
    table.name: tuple(column.name for column in table.c if column.type is Json) for table in metadata.tables.values()
}
"""The JSON columns of each table, by table name."""


def _check_json(row: Row, columns: Iterable[str]) -> None:
    # Listing reads thousands of rows: each reader looks only at the JSON columns it reads, by name.
    for column in columns:
        value = row[column]
        if isinstance(value, UnreadableJson):
            raise ValueError(f"the {column} column holds text that is not JSON ({value.error}): {value.text[:80]!r}")


def _json_type(value: object) -> str:
    names = {list: "array", str: "string", bool: "boolean", int: "number", float: "number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _corrupt_call(row: Row, error: Exception) -> CorruptStateError:
    return CorruptStateError(
        f"The {row['name']} call {row['call_id']} of chat {row['chat_id']} cannot be read: {error}",
        chat_id=row["chat_id"],
        call_id=row["call_id"],
    )


def message_values(message: Message) -> dict[str, Any]:
    """The columns of a message row (without chat and position)."""
    calls = [_call_value(call) for call in message.tool_calls]
    usage = message.usage
    return {
        "role": message.role,
        "content": stored_text(message.content),
        "tool_calls": calls or None,
        "tool_call_id": message.tool_call_id,
        "usage": None if usage is None else {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens},
        "provider_data": None if message.provider_data is None else dict(message.provider_data),
    }


def call_values(record: CallRecord) -> dict[str, Any]:
    """The columns of a new call's row that come from its record (without chat, position, version and time)."""
    call = record.call
    return {
        "call_id": call.id,
        "name": call.name,
        "arguments": dict(call.arguments),
        "needs_approval": record.needs_approval,
    }


def _call_value(call: ToolCall) -> dict[str, Any]:
    value: dict[str, Any] = {"id": call.id, "name": call.name, "arguments": dict(call.arguments)}
    if call.provider_data is not None:
        value["provider_data"] = dict(call.provider_data)
    return value


def message_from_row(row: Row) -> Message:
    """The message a row holds; raises [`CorruptStateError`][tarry.errors.CorruptStateError] naming the message when it
    cannot be read."""
    try:
        _check_json(row, _JSON_COLUMNS["tarry_messages"])
        calls = tuple(
            ToolCall(item["id"], item["name"], item.get("arguments") or {}, provider_data=item.get("provider_data"))
            for item in row["tool_calls"] or ()
        )
        usage = row["usage"]
        return Message(
            role=row["role"],
            content=read_text(row["content"]),
            tool_calls=calls,
            tool_call_id=row["tool_call_id"],
            usage=None if usage is None else Usage(**usage),
            provider_data=row["provider_data"],
        )
    except _UNREADABLE as error:
        raise CorruptStateError(
            f"Message {row['position']} of chat {row['chat_id']} cannot be read: {error}", chat_id=row["chat_id"]
        ) from error


def question_values(question: Question) -> dict[str, Any]:
    """The columns of a question row (without chat and call)."""
    return {
        "id": question.id,
        "kind": question.kind,
        "message": stored_text(question.message),
        "requested_schema": question.requested_schema if question.fields else None,
        "url": question.url,
        "source": question.source,
        "key": question.key,
        "extra": _extra_value(question),
        "asked_at": question.asked_at,
        "expires_at": question.expires_at,
        "decision": question.decision,
        "answer": question.answer,
        "note": question.note,
        "decided_at": question.decided_at,
        "policy": None if question.policy is None else question.policy.to_dict(),
        "votes": [vote.to_dict() for vote in question.votes] or None,
        "digest": question.proposal_digest,
        **decider_values(question.decided_by, question.channel),
        "follow_up_at": next_at(question),
        "reminded_at": question.reminded_at,
        "escalated_at": question.escalated_at,
    }


def _extra_value(question: Question) -> dict[str, Any] | None:
    """What the ``extra`` column holds: the question's protocol state, and its flags under the keys they always had
    there (``awaited``, ``after``, ``messages``) so rows written before the flags had fields read back the same."""
    flags = {
        "awaited": question.awaited or None,
        "after": question.after,
        "messages": question.messages_said,
        "editable": question.editable,
        "changed_arguments": question.changed_arguments,
    }
    return {**question.extra, **{key: value for key, value in flags.items() if value is not None}} or None


_Extra = tuple[dict[str, Any], bool, str | None, int | None, dict[str, Any] | None, dict[str, Any] | None]
"""A question's fields that its ``extra`` column holds (see ``_extra_fields``)."""


_FLAGS: dict[str, Callable[[Any], bool]] = {
    "awaited": lambda value: value is True,
    "after": lambda value: isinstance(value, str),
    "messages": lambda value: type(value) is int,
    "editable": lambda value: isinstance(value, Mapping),
    "changed_arguments": lambda value: isinstance(value, Mapping),
}
"""The keys of the ``extra`` column that hold a question's flags, each with what a value of its type is."""


def _extra_fields(stored: object) -> _Extra:
    """The fields of a question that its ``extra`` column holds: ``extra``, ``awaited``, ``after``,
    ``messages_said``, ``editable`` and ``changed_arguments``. Each flag is read when its value is of its type; the
    rest (protocol state, and a flag's value of another type, which no question reads) is kept verbatim in
    ``extra``."""
    if stored is None:
        return {}, False, None, None, None, None
    if not isinstance(stored, Mapping):
        raise TypeError(f"its extra is a JSON {_json_type(stored)}, not an object")
    extra = dict(stored)
    flags = {key: extra.pop(key) for key in _FLAGS.keys() & extra.keys() if _FLAGS[key](extra[key])}
    return (
        extra,
        flags.get("awaited") is True,
        flags.get("after"),
        flags.get("messages"),
        flags.get("editable"),
        flags.get("changed_arguments"),
    )


def decider_values(by: Principal | None, channel: Channel | None) -> dict[str, Any]:
    """The columns of a question row that say who decided it, through what."""
    return {
        "decided_by": None if by is None else by.id,
        "decided_by_name": None if by is None else by.name,
        "channel": channel,
    }


def question_and_call_from_row(row: Row) -> Question:
    """The question of a row of ``questions`` joined with its call's columns (``call_id`` ``None`` for a chat's own
    question, which has no call)."""
    return question_from_row(row, None if row["call_id"] is None else call_from_row(row))


def question_from_row(row: Row, call: ToolCall | None) -> Question:
    """The question a row holds, asked by ``call``; raises [`CorruptStateError`][tarry.errors.CorruptStateError] naming
    the question and call."""
    try:
        _check_json(row, _JSON_COLUMNS["tarry_questions"])
        schema = row["requested_schema"]
        if schema is not None and not isinstance(schema, Mapping):
            raise TypeError(f"its requested_schema is a JSON {_json_type(schema)}, not an object")
        fields = fields_from_schema(schema) if schema else ()
        if row["kind"] not in QUESTION_KINDS:
            raise ValueError(f"its kind {row['kind']!r} is none of {', '.join(QUESTION_KINDS)}")
        extra, awaited, after, said, editable, changed = _extra_fields(row["extra"])
        return Question.restored(
            id=row["id"],
            kind=row["kind"],
            message=read_text(row["message"]),
            fields=fields,
            url=row["url"],
            tool_call=call,
            expires_at=row["expires_at"],
            asked_at=row["asked_at"],
            chat_id=row["chat_id"],
            verdict=_verdict(row),
            source=row["source"],
            key=row["key"],
            extra=extra,
            policy=None if row["policy"] is None else Approval.from_dict(row["policy"]),
            votes=tuple(Vote.from_dict(vote) for vote in row["votes"] or ()),
            awaited=awaited,
            after=after,
            messages_said=said,
            editable=editable,
            changed_arguments=changed,
            reminded_at=row.get("reminded_at"),
            escalated_at=row.get("escalated_at"),
        )
    except _UNREADABLE as error:
        asker = "" if call is None else f" of the {call.name} call {call.id}"
        raise CorruptStateError(
            f"Question {row['id']}{asker} (chat {row['chat_id']}) cannot be read: {error}",
            chat_id=row["chat_id"],
            call_id=None if call is None else call.id,
        ) from error


def _verdict(row: Row) -> Verdict | None:
    """What a question's row records of its decision (``None`` while undecided)."""
    if row["decision"] is None:
        return None
    by = None if row["decided_by"] is None else Principal(row["decided_by"], row["decided_by_name"])
    return Verdict(row["decision"], row["decided_at"], row["answer"], row["note"], by, row["channel"])


def call_from_row(row: Row) -> ToolCall:
    """The tool call a row holds, with the arguments as the model sent them.

    Raises [`CorruptStateError`][tarry.errors.CorruptStateError] naming the call when the arguments are not JSON or not
    an object.
    """
    try:
        _check_json(row, ("arguments",))
        arguments = row["arguments"]
        if not isinstance(arguments, Mapping):
            raise TypeError(f"its arguments are a JSON {_json_type(arguments)}, not an object")
        return ToolCall(row["call_id"], row["name"], arguments)
    except _UNREADABLE as error:
        raise _corrupt_call(row, error) from error


def waiting_on(row: Row) -> set[str]:
    """The ids of the questions a call row's paused task waits on; raises
    [`CorruptStateError`][tarry.errors.CorruptStateError] naming the call."""
    try:
        _check_json(row, ("waiting_on",))
    except ValueError as error:
        raise _corrupt_call(row, error) from error
    ids = row["waiting_on"] or []
    if not isinstance(ids, list) or not all(isinstance(question_id, str) for question_id in ids):
        raise _corrupt_call(row, TypeError(f"its waiting_on is not a list of question ids: {ids!r}"))
    return set(ids)


def saved_state(row: Row) -> Any:
    """The paused task's saved state a call row holds (``None``: it never paused); raises
    [`CorruptStateError`][tarry.errors.CorruptStateError]."""
    try:
        _check_json(row, ("state",))
    except ValueError as error:
        raise _corrupt_call(row, error) from error
    return row["state"]


def load_task(row: Row, call: ToolCall) -> Task | None:
    """The paused task a call row holds, rebuilt by ``Task.load`` (no tool at hand)."""
    return rebuild_task(row["chat_id"], call, saved_state(row), None)
