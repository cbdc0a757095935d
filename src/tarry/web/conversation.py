"""A chat's conversation as an approver reads it: the messages, each tool call with its result, what waits now.

A bridged chat's assistant messages hold the foreign run's transcript, as its library holds it
([`new_steps`][tarry.bridges.new_steps]): each shows the steps the run took since the one before.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from tarry.bridges import Step, new_steps
from tarry.messages import Message, ToolCall
from tarry.questions import Question
from tarry.store.audit import DecisionEvent
from tarry.store.waiting import WaitingTask
from tarry.web.views import pretty_json, visible

WAITS = {"approval": "waits for approval", "form": "waits for an answer", "url": "waits for a visit to a link"}


@dataclass
class CallView:
    """One tool call: its arguments, and its result or what it waits on."""

    call: ToolCall
    arguments: str
    result: str | None = None
    waits: str | None = None
    question: Question | None = None
    decisions: list[DecisionEvent] = field(default_factory=list)
    """What people decided about the call (approvals counted, decisions made), oldest first."""


@dataclass
class Turn:
    """One user or assistant message, with the assistant's tool calls."""

    message: Message
    calls: list[CallView] = field(default_factory=list)
    steps: tuple[Step, ...] = ()
    """A bridged run's steps since the message before (its library's transcript); none for tarry's own chats."""

    @property
    def role(self) -> str:
        """``user`` or ``assistant``."""
        return self.message.role


def _result_text(message: Message) -> str:
    try:
        return pretty_json(json.loads(message.content))
    except ValueError:
        return visible(message.content)


def turns(
    messages: Sequence[Message],
    questions: Sequence[Question],
    tasks: Sequence[WaitingTask],
    events: Sequence[DecisionEvent] = (),
) -> list[Turn]:
    """The conversation as turns: tool results sit with their calls, with who decided what.

    Open calls say what they wait on.
    """
    decided = _decisions_by_call(events)
    results = {message.tool_call_id: message for message in messages if message.role == "tool"}
    asked = {question.tool_call.id: question for question in questions if question.tool_call is not None}
    working = {waiting.task.tool_call.id: waiting for waiting in tasks if waiting.task.tool_call is not None}
    shown = []
    for message, steps in zip(messages, new_steps(messages), strict=True):
        if message.role == "tool":
            continue
        turn = Turn(message, steps=steps)
        for call in message.tool_calls:
            view = CallView(call, pretty_json(dict(call.arguments)), decisions=decided.get(call.id, []))
            _show_outcome(view, results.get(call.id), asked.get(call.id), working.get(call.id))
            turn.calls.append(view)
        shown.append(turn)
    return shown


def _decisions_by_call(events: Sequence[DecisionEvent]) -> dict[str, list[DecisionEvent]]:
    """What people decided about each call (approvals counted, decisions made, not cancellations), and what its
    approval's policy did (reminded, escalated), by call id."""
    decided: dict[str, list[DecisionEvent]] = {}
    shown = ("decided", "counted", "reminded", "escalated")
    for event in events:
        if event.call_id is not None and event.outcome in shown and event.decision != "cancel":
            decided.setdefault(event.call_id, []).append(event)
    return decided


def _show_outcome(
    view: CallView, result: Message | None, question: Question | None, working: WaitingTask | None
) -> None:
    """Put the call's result on ``view``, else what the call waits on: its question, its task, or its run."""
    if result is not None:
        view.result = _result_text(result)
    elif question is not None:
        view.question = question
        view.waits = WAITS[question.kind]
    elif working is not None:
        task = working.task
        view.waits = f"works: {task.status_message}" if task.status_message else "works on a task"
    else:
        view.waits = "not run yet"
