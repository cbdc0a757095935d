"""Approving a call with changed arguments: which parameters a person may change, checking a change, the arguments
each approval is for, and the call as it ran.

A chat records, with a call's approval question, the JSON schema of the parameters its tool lets a person change
(``Question.editable``), so any process can check a change without the tool. An approval with changes is an
``accept`` whose answer holds the call's arguments as changed (``{"arguments": {...}}``); each vote under an
[`Approval`][tarry.approvals.Approval] policy holds the digest of the arguments it approved, and only votes for the
same arguments count together.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from jsonschema import Draft202012Validator

from tarry.calls import CallRecord
from tarry.errors import InvalidAnswerError
from tarry.messages import Message, ToolCall
from tarry.policies import Approval, Vote
from tarry.principals import Channel, Principal
from tarry.questions import Question, digest_of

__all__ = [
    "Editable",
    "approved_arguments",
    "arguments_digest",
    "as_ran",
    "asks_more",
    "changed",
    "check_edit",
    "counted_votes",
    "edit_note",
    "editable_schema",
    "recorded_answer",
    "shown_as_ran",
    "vote_for",
    "with_note",
]

Editable = bool | Collection[str]
"""What a tool lets a person change while approving its call: ``True`` every parameter, ``False`` none, or the names
of the parameters that may change."""


def arguments_digest(arguments: Mapping[str, Any]) -> str:
    """The SHA-256 of ``arguments`` as canonical JSON (keys sorted, no spaces), in hex: what a vote approved.

    >>> arguments_digest({"b": 1, "a": [1, 2]}) == arguments_digest({"a": [1, 2], "b": 1})
    True
    """
    return digest_of(arguments)


def editable_schema(name: str, parameters: Mapping[str, Any], editable: Editable) -> dict[str, Any] | None:
    """The JSON schema of the parameters of tool ``name`` (``parameters``, its schema) a person may change, as
    ``editable`` says; ``None`` when none may. Raises ``ValueError`` for a name that is no parameter of the tool."""
    if editable is False:
        return None
    properties: Mapping[str, Any] = parameters.get("properties") or {}
    if editable is True:
        names = list(properties)
    else:
        if isinstance(editable, str) or not isinstance(editable, Collection):
            raise TypeError(f"Tool {name}: editable must be True, False or parameter names, got {editable!r}")
        unknown = sorted(set(editable) - set(properties))
        if unknown:
            raise ValueError(f"Tool {name}: editable names {', '.join(map(repr, unknown))}, which it has no parameter")
        names = [item for item in properties if item in editable]
    if not names:
        return None
    schema: dict[str, Any] = {"type": "object", "properties": {item: properties[item] for item in names}}
    if "$defs" in parameters:
        schema["$defs"] = parameters["$defs"]
    return schema


def check_edit(question: Question, changes: Mapping[str, Any]) -> dict[str, Any]:
    """The answer an approval of ``question`` with ``changes`` records: ``{"arguments": ...}``, the arguments it
    proposes now (``Question.proposal``) with ``changes`` (parameter names to new values) applied.

    Raises [`InvalidAnswerError`][tarry.errors.InvalidAnswerError] naming each parameter whose new value does not
    fit the tool's schema, or that the tool does not let a person change (under ``"arguments"`` when the question is
    no call's approval, or the tool allows no change at all).
    """
    proposal, schema = _editable(question, changes)
    name = question.tool_call.name if question.tool_call is not None else ""
    properties: Mapping[str, Any] = schema.get("properties") or {}
    errors = {key: f"the {name} tool does not let a person change {key}" for key in changes if key not in properties}
    checked = {key: value for key, value in changes.items() if key in properties}
    for error in Draft202012Validator(schema).iter_errors(checked):
        where = str(error.absolute_path[0]) if error.absolute_path else "arguments"
        errors.setdefault(where, error.message)
    if errors:
        raise InvalidAnswerError(errors)
    return {"arguments": {**proposal, **changes}}


def _editable(question: Question, changes: object) -> tuple[dict[str, Any], dict[str, Any]]:
    """What ``question`` proposes now and the schema of what may change, when ``changes`` may apply to it at all;
    otherwise raises [`InvalidAnswerError`][tarry.errors.InvalidAnswerError] under ``"arguments"`` saying why."""
    proposal = question.proposal
    if proposal is None or question.tool_call is None:
        raise InvalidAnswerError({"arguments": "only the approval of a tool call has arguments to change"})
    if not isinstance(changes, Mapping) or not all(isinstance(key, str) for key in changes):
        raise InvalidAnswerError({"arguments": "changed arguments are an object of parameter names to values"})
    if question.editable is None:
        name = question.tool_call.name
        raise InvalidAnswerError({"arguments": f"the {name} tool does not let a person change its arguments"})
    return proposal, question.editable


def approved_arguments(question: Question, answer: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The arguments an approval of ``question`` with ``answer`` is for: those the answer holds, else the ones the
    question proposes now; ``None`` for a question that is no call's approval."""
    if answer is not None and isinstance(answer.get("arguments"), Mapping):
        return dict(answer["arguments"])
    return question.proposal


def _original_digest(question: Question) -> str | None:
    return None if question.tool_call is None else arguments_digest(question.tool_call.arguments)


def counted_votes(question: Question, arguments: Mapping[str, Any] | None) -> list[Vote]:
    """The votes of ``question`` that approved ``arguments`` (a vote without a digest approved the model's)."""
    if arguments is None:
        return list(question.votes)
    wanted, original = arguments_digest(arguments), _original_digest(question)
    return [vote for vote in question.votes if (vote.digest or original) == wanted]


def vote_for(
    question: Question, by: Principal, at: datetime, answer: Mapping[str, Any] | None, channel: Channel | None = None
) -> Vote:
    """``by``'s vote at ``at`` (through ``channel``) for the arguments an approval of ``question`` with ``answer`` is
    for."""
    arguments = approved_arguments(question, answer)
    if arguments is None:
        return Vote(by, at, channel=channel)
    digest = arguments_digest(arguments)
    return Vote(by, at, digest, None if digest == _original_digest(question) else arguments, channel)


def recorded_answer(question: Question, answer: dict[str, Any] | None) -> dict[str, Any] | None:
    """The answer an accepted approval of ``question`` records: ``{"arguments": ...}`` when the arguments it is for
    differ from the model's, an empty answer when they do not; any other question's ``answer`` as it is."""
    arguments = approved_arguments(question, answer) if question.kind == "approval" else None
    if arguments is None:
        return answer
    return {"arguments": arguments} if arguments_digest(arguments) != _original_digest(question) else {}


def changed(record: CallRecord) -> dict[str, Any] | None:
    """The arguments a person changed ``record``'s call to while approving it, or ``None`` when nobody did."""
    approval = record.approval
    if approval is None or approval.decision != "accept" or not approval.answer:
        return None
    arguments = approval.answer.get("arguments")
    return dict(arguments) if isinstance(arguments, Mapping) else None


def as_ran(record: CallRecord) -> ToolCall:
    """``record``'s call with the arguments it runs with: a person's changes, if they made any."""
    arguments = changed(record)
    return record.call if arguments is None else replace(record.call, arguments=arguments)


def edit_note(record: CallRecord) -> str | None:
    """What the model is told of a person's change to ``record``'s call, from what to what (``None``: no change)."""
    arguments = changed(record)
    if arguments is None:
        return None
    before = json.dumps(dict(record.call.arguments), ensure_ascii=False, sort_keys=True, default=str)
    after = json.dumps(arguments, ensure_ascii=False, sort_keys=True, default=str)
    return (
        f"A person changed the arguments of this {record.call.name} call before approving it: from {before} to "
        f"{after}. It ran with the changed arguments."
    )


def with_note(result: Message, record: CallRecord) -> Message:
    """``result``, the tool message ending ``record``'s call, telling the model first of a person's change."""
    note = edit_note(record)
    return result if note is None else replace(result, content=f"{note}\n\n{result.content}")


def shown_as_ran(messages: Iterable[Message], records: Mapping[str, CallRecord]) -> tuple[Message, ...]:
    """``messages`` as the model is shown them: each call a person changed, with the arguments it ran with."""
    shown: list[Message] = []
    for message in messages:
        if any(changed(records[call.id]) is not None for call in message.tool_calls if call.id in records):
            calls = tuple(as_ran(records[call.id]) if call.id in records else call for call in message.tool_calls)
            message = replace(message, tool_calls=calls)
        shown.append(message)
    return tuple(shown)


def asks_more(asked: Approval | None, satisfied: Approval | None) -> bool:
    """Whether ``asked`` (the policy of a call as a person changed it) asks for more than ``satisfied`` (the policy its
    approval met): more people, or another group of them."""
    if asked is None:
        return False
    met = satisfied or Approval()
    return asked.count > met.count or (asked.by is not None and asked.by != met.by)
