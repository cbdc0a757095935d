"""The JSON API's bodies, as pydantic models (they make the OpenAPI schema)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from tarry.messages import ToolCall
from tarry.questions import Question
from tarry.store.waiting import WaitingTask


class ToolCallOut(BaseModel):
    """The tool call that waits: its name and the arguments exactly as the model sent them."""

    id: str
    name: str
    arguments: dict[str, Any]

    @classmethod
    def of(cls, call: ToolCall | None) -> ToolCallOut | None:
        """The body for ``call``, or ``None``."""
        return None if call is None else cls(id=call.id, name=call.name, arguments=dict(call.arguments))


class QuestionOut(BaseModel):
    """A question, pending or decided."""

    id: str
    kind: Literal["approval", "form", "url"]
    message: str
    requested_schema: dict[str, Any] = Field(description="The fields as a JSON schema object.")
    url: str | None
    tool_call: ToolCallOut | None
    chat_id: str | None
    source: str | None = Field(description="The MCP server that asked, or null for tarry's own questions.")
    asked_at: datetime | None
    expires_at: datetime | None
    decision: Literal["accept", "decline", "cancel"] | None
    answer: dict[str, Any] | None
    note: str | None
    decided_at: datetime | None

    @classmethod
    def of(cls, question: Question) -> QuestionOut:
        """The body for ``question``."""
        call = question.tool_call
        return cls(
            id=question.id,
            kind=question.kind,
            message=question.message,
            requested_schema=question.requested_schema,
            url=question.url,
            tool_call=ToolCallOut.of(call),
            chat_id=question.chat_id,
            source=question.source,
            asked_at=question.asked_at,
            expires_at=question.expires_at,
            decision=question.decision,
            answer=question.answer,
            note=question.note,
            decided_at=question.decided_at,
        )


class DecisionOut(BaseModel):
    """A decision this request recorded."""

    recorded: Literal[True] = True
    question: QuestionOut


class DeclineIn(BaseModel):
    """An optional note for the model about why the call was declined."""

    model_config = ConfigDict(extra="ignore")
    note: str | None = Field(default=None, max_length=10_000)


class TaskOut(BaseModel):
    """A paused task: work that finishes later."""

    chat_id: str
    tool_call: ToolCallOut | None
    status: str
    status_message: str | None
    poll_interval: float | None = Field(description="Seconds between checks the task asks for.")
    since: datetime = Field(description="When the call was recorded; the task has waited since about then.")
    next_check: datetime | None = Field(description="When a background worker next looks at the chat, if scheduled.")

    @classmethod
    def of(cls, waiting: WaitingTask) -> TaskOut:
        """The body for a waiting task."""
        task, call = waiting.task, waiting.task.tool_call
        return cls(
            chat_id=waiting.chat_id,
            tool_call=ToolCallOut.of(call),
            status=task.status,
            status_message=task.status_message,
            poll_interval=task.poll_interval,
            since=waiting.since,
            next_check=waiting.next_check,
        )
