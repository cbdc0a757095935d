"""Tasks: tool calls that finish later."""

from __future__ import annotations

import copy
import json
from collections.abc import Awaitable, Mapping
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar

from tarry.messages import ToolCall

if TYPE_CHECKING:
    from tarry.questions import Question


class TaskStatus(StrEnum):
    """The five states of a task."""

    WORKING = "working"
    INPUT_REQUIRED = "input_required"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class Task:
    """A tool call that finishes later.

    A tool's ``execute`` returns a task to pause its call instead of waiting for the work;
    every later ``complete()`` of the chat hands the task to the tool's ``resume``, which
    returns the call's result once there is one, or the task to stay paused.

    >>> task = Task(data={"job": 7})
    >>> task.status, task.done()
    ('working', False)
    >>> Task.load(task.to_dict()).data
    {'job': 7}
    """

    STATUSES: ClassVar[tuple[str, ...]] = tuple(status.value for status in TaskStatus)
    DONE: ClassVar[tuple[str, ...]] = ("completed", "failed", "cancelled")

    questions: list[Question]
    """The questions the task waits on: the one ``Tool.ask`` made, or those an MCP server sent."""
    answer: dict[str, Any] | None
    """The accepted values of the task's question, once answered."""

    def __init__(
        self,
        status: str | TaskStatus = "working",
        status_message: str | None = None,
        poll_interval: float | None = None,
        data: Mapping[str, Any] | None = None,
        tool_call: ToolCall | None = None,
    ) -> None:
        self.status = _status(status)
        if status_message is not None and not isinstance(status_message, str):
            raise TypeError(f"Task status_message must be str or None, got {type(status_message).__name__}")
        self.status_message = status_message
        self.poll_interval = _poll_interval(poll_interval)
        self.data = _data(data)
        self.tool_call = tool_call
        self.questions = []
        self.answer = None

    @property
    def expires_at(self) -> datetime | None:
        """When the task's source gives up on it (aware UTC), or ``None``. The base task never expires."""
        return None

    @property
    def question(self) -> Question | None:
        """The (first) question the task waits on, or ``None``."""
        return self.questions[0] if self.questions else None

    def with_question(self, *questions: Question) -> Task:
        """Make the task wait on ``questions`` and return it."""
        self.questions = list(questions)
        self.answer = None
        return self

    def waits_on_person(self) -> bool:
        """True while a question of the task has no decision."""
        return any(question.decision is None for question in self.questions)

    def done(self) -> bool:
        """True once the task completed, failed or was cancelled."""
        return self.status in self.DONE

    def completed(self) -> bool:
        """True when the task finished with a result."""
        return self.status == "completed"

    def failed(self) -> bool:
        """True when the task failed."""
        return self.status == "failed"

    def cancelled(self) -> bool:
        """True when the task was cancelled before it finished."""
        return self.status == "cancelled"

    def input_required(self) -> bool:
        """True when the task waits on a person."""
        return self.status == "input_required"

    def refresh(self) -> Task | Awaitable[Task]:
        """Check on the work once and return the task. The base class does nothing.

        Subclasses override it, as a plain method or a coroutine.
        """
        return self

    def cancel(self) -> Task | Awaitable[Task]:
        """Stop the work and return the task. The base class does nothing.

        A chat calls it on every paused task when the chat is cancelled. Subclasses
        override it, as a plain method or a coroutine.
        """
        return self

    def to_dict(self) -> dict[str, Any]:
        """The task as JSON-safe data; [`load`][tarry.Task.load] turns it back into the task."""
        state: dict[str, Any] = {
            "status": self.status,
            "status_message": self.status_message,
            "poll_interval": self.poll_interval,
            "data": copy.deepcopy(self.data) or None,
        }
        return {"task": {key: value for key, value in state.items() if value is not None}}

    @classmethod
    def load(cls, state: Mapping[str, Any], tool_call: ToolCall | None = None) -> Task:
        """The task that ``state``, a [`to_dict`][tarry.Task.to_dict] result, describes."""
        if not isinstance(state, Mapping) or not isinstance(state.get("task"), Mapping):
            raise ValueError(f"Task state must look like {{'task': {{...}}}}, got {state!r}")
        task = state["task"]
        if "status" not in task:
            raise ValueError(f"Task state has no status: {state!r}")
        return cls(
            status=task["status"],
            status_message=task.get("status_message"),
            poll_interval=task.get("poll_interval"),
            data=task.get("data"),
            tool_call=tool_call,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Task):
            return NotImplemented
        return type(self) is type(other) and self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.to_dict()['task']!r})"


def _status(status: object) -> str:
    value = status.value if isinstance(status, TaskStatus) else status
    if value not in Task.STATUSES:
        raise ValueError(f"Unknown task status {status!r}; expected one of {', '.join(Task.STATUSES)}")
    return str(value)


def _poll_interval(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"Task poll_interval must be seconds as a number or None, got {value!r}")
    if value < 0:
        raise ValueError(f"Task poll_interval must not be negative, got {value!r}")
    return float(value)


def _data(data: object) -> dict[str, Any]:
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise TypeError(f"Task data must be a dict, got {type(data).__name__}")
    try:
        text = json.dumps(_stringify_keys(data), allow_nan=False)
    except (TypeError, ValueError) as error:
        raise TypeError(f"Task data must serialize to JSON: {error}") from error
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def _stringify_keys(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(key): _stringify_keys(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_stringify_keys(item) for item in value]
    return value
