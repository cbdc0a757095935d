"""JSON schemas of what ``tarry … --json`` prints: the shapes scripts may rely on (see docs/cli.md)."""

from __future__ import annotations

from typing import Any

TIME = {"type": ["string", "null"], "format": "date-time"}
TOOL_CALL: dict[str, Any] = {
    "type": "object",
    "required": ["id", "name", "arguments"],
    "additionalProperties": False,
    "properties": {"id": {"type": "string"}, "name": {"type": "string"}, "arguments": {"type": "object"}},
}
CHANNELS = ["api", "web", "cli", "code", "mcp", "email", "slack", "grant", "policy"]
PRINCIPAL: dict[str, Any] = {
    "type": "object",
    "required": ["id", "name"],
    "additionalProperties": False,
    "properties": {"id": {"type": "string", "minLength": 1}, "name": {"type": ["string", "null"]}},
}
QUESTION: dict[str, Any] = {
    "type": "object",
    "required": [
        "id", "kind", "message", "requested_schema", "url", "tool_call", "expires_at", "asked_at",
        "chat_id", "decision", "answer", "note", "decided_at", "decided_by", "channel", "policy", "votes", "source",
    ],
    "additionalProperties": False,
    "properties": {
        "id": {"type": "string", "minLength": 1},
        "kind": {"enum": ["approval", "form", "url"]},
        "message": {"type": "string"},
        "requested_schema": {
            "type": "object",
            "required": ["type", "properties", "required"],
            "properties": {
                "type": {"const": "object"},
                "properties": {"type": "object"},
                "required": {"type": "array", "items": {"type": "string"}},
            },
        },
        "url": {"type": ["string", "null"]},
        "tool_call": {"anyOf": [TOOL_CALL, {"type": "null"}]},
        "expires_at": TIME,
        "asked_at": TIME,
        "chat_id": {"type": "string"},
        "decision": {"enum": [None, "accept", "decline", "cancel", "respond"]},
        "answer": {"type": ["object", "null"]},
        "note": {"type": ["string", "null"]},
        "decided_at": TIME,
        "decided_by": {"anyOf": [PRINCIPAL, {"type": "null"}]},
        "channel": {"enum": [None, *CHANNELS]},
        "policy": {
            "anyOf": [
                {
                    "type": "object", "required": ["count", "by"], "additionalProperties": False,
                    "properties": {
                        "count": {"type": "integer", "minimum": 1}, "by": {"type": ["string", "null"]},
                        "grant_suffices": {"const": True}, "remind_after": {"type": "number", "exclusiveMinimum": 0},
                        "escalate_after": {"type": "number", "exclusiveMinimum": 0},
                        "escalate_to": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                        "on_timeout": {"const": "decline"},
                    },
                },
                {"type": "null"},
            ]
        },
        "votes": {
            "type": "array",
            "items": {
                "type": "object", "required": ["id", "name", "at"], "additionalProperties": False,
                "properties": {
                    **PRINCIPAL["properties"], "at": TIME, "digest": {"type": "string"},
                    "arguments": {"type": "object"}, "channel": {"type": "string"},
                },
            },
        },
        "source": {"type": ["string", "null"]},
        "editable": {"type": ["object", "null"]},
        "proposal": {"type": ["object", "null"]},
        "reminded_at": TIME,
        "escalated_at": TIME,
        "escalated_to": {"type": "array", "items": {"type": "string"}},
        "proposal_digest": {"anyOf": [{"type": "string", "pattern": "^[0-9a-f]{64}$"}, {"type": "null"}]},
    },
}  # fmt: skip
PENDING = {"type": "array", "items": QUESTION}
CHAT: dict[str, Any] = {
    "type": "object",
    "required": [
        "id", "agent", "model", "created_at", "messages", "waiting", "open_calls", "questions", "cancel_requested_at",
    ],
    "properties": {
        "id": {"type": "string"},
        "agent": {"type": ["string", "null"]},
        "model": {"type": ["string", "null"]},
        "created_at": {"type": "string", "format": "date-time"},
        "messages": {"type": "integer", "minimum": 0},
        "waiting": {"type": "boolean"},
        "open_calls": {"type": "integer", "minimum": 0},
        "questions": {"type": "integer", "minimum": 0},
        "cancel_requested_at": TIME,
    },
}  # fmt: skip
CHATS = {"type": "array", "items": {**CHAT, "additionalProperties": False}}
TASK: dict[str, Any] = {
    "type": "object",
    "required": ["chat_id", "tool_call", "status", "status_message", "poll_interval", "since", "next_check"],
    "additionalProperties": False,
    "properties": {
        "chat_id": {"type": "string"},
        "tool_call": {"anyOf": [TOOL_CALL, {"type": "null"}]},
        "status": {"enum": ["working", "input_required", "completed", "failed", "cancelled"]},
        "status_message": {"type": ["string", "null"]},
        "poll_interval": {"type": ["number", "null"]},
        "since": {"type": "string", "format": "date-time"},
        "next_check": TIME,
    },
}
TASKS = {"type": "array", "items": TASK}
MESSAGE: dict[str, Any] = {
    "type": "object",
    "required": ["role", "content", "tool_calls", "tool_call_id"],
    "additionalProperties": False,
    "properties": {
        "role": {"enum": ["user", "assistant", "tool"]},
        "content": {"type": "string"},
        "tool_calls": {"type": "array", "items": TOOL_CALL},
        "tool_call_id": {"type": ["string", "null"]},
    },
}
SHOW: dict[str, Any] = {
    **CHAT,
    "required": [*CHAT["required"], "instructions", "transcript", "pending_questions", "tasks"],
    "properties": {
        **CHAT["properties"],
        "instructions": {"type": ["string", "null"]},
        "transcript": {"type": "array", "items": MESSAGE},
        "pending_questions": PENDING,
        "tasks": TASKS,
    },
    "additionalProperties": False,
}
HISTORY: dict[str, Any] = {
    "type": "array",
    "items": {
        "type": "object",
        "required": [
            "id", "at", "chat_id", "question_id", "kind", "message", "call_id", "tool", "arguments", "decision",
            "outcome", "answer", "note", "by", "channel", "detail",
        ],
        "additionalProperties": False,
        "properties": {
            "id": {"type": "integer"},
            "at": {**TIME, "type": "string"},
            "chat_id": {"type": "string"},
            "question_id": {"type": "string"},
            "kind": {"enum": ["approval", "form", "url"]},
            "message": {"type": "string"},
            "call_id": {"type": ["string", "null"]},
            "tool": {"type": ["string", "null"]},
            "arguments": {"type": ["object", "null"]},
            "decision": {"enum": ["accept", "decline", "cancel", "respond", "remind", "escalate"]},
            "outcome": {
                "enum": ["decided", "counted", "lost", "expired", "refused", "running", "reminded", "escalated"]
            },
            "answer": {"type": ["object", "null"]},
            "note": {"type": ["string", "null"]},
            "by": {"anyOf": [PRINCIPAL, {"type": "null"}]},
            "channel": {"enum": CHANNELS},
            "detail": {"type": ["string", "null"]},
        },
    },
}  # fmt: skip
