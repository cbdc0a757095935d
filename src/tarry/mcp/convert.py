"""Between MCP wire shapes and tarry's: tool results, elicitations as questions, decisions as responses."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from tarry.questions import Question, fields_from_schema


def result_value(result: Mapping[str, Any]) -> Any:
    """What the model gets for a ``CallToolResult`` (wire form): its text, or ``{"error": ...}`` when ``isError``."""
    if not isinstance(result, Mapping) or not isinstance(result.get("content", []), list):
        raise ValueError("the tool result is not a CallToolResult")
    text = "\n".join(_block_text(block) for block in result.get("content") or [])
    structured = result.get("structuredContent")
    if not text and structured is not None:
        text = json.dumps(structured)
    if result.get("isError"):
        return {"error": text or "The tool reported an error."}
    return text


def _block_text(block: Any) -> str:
    """One content block of a tool result as the model reads it: its text, else a line naming what it holds."""
    if not isinstance(block, Mapping) or not isinstance(block.get("type"), str):
        raise ValueError("the tool result holds a content block without a type")
    kind = block["type"]
    if kind == "text":
        return str(block.get("text", ""))
    if kind == "resource" and isinstance(block.get("resource"), Mapping) and "text" in block["resource"]:
        return str(block["resource"]["text"])
    if kind == "resource_link":
        return f"[resource {block.get('uri', '')}]"
    return f"[{kind} content: {block.get('mimeType', 'unknown type')}]"


def error_text(result: Mapping[str, Any]) -> str:
    """The text of an ``isError`` tool result."""
    value = result_value(result)
    return str(value["error"]) if isinstance(value, dict) else str(value)


def question_for(request: Mapping[str, Any], *, source: str, key: str | None, ttl: float | None) -> Question:
    """The [`Question`][tarry.Question] an ``elicitation/create`` request's params (wire form) ask.

    Raises ``ValueError`` for a request tarry cannot show (an unknown mode, a schema it cannot map).
    """
    mode = request.get("mode", "form")
    message = request.get("message")
    if not isinstance(message, str) or not message:
        raise ValueError("the elicitation has no message")
    extra: dict[str, Any] = {"mode": mode}
    if mode == "url":
        url = request.get("url")
        if not isinstance(url, str) or not url:
            raise ValueError("the URL elicitation has no url")
        if request.get("elicitationId"):
            extra["elicitation_id"] = request["elicitationId"]
        return Question(id="", kind="url", message=message, url=url, source=source, key=key, extra=extra, ttl=ttl)
    if mode != "form":
        raise ValueError(f"unknown elicitation mode {mode!r}")
    schema = request.get("requestedSchema") or {}
    if not isinstance(schema, Mapping):
        raise ValueError("the elicitation's requestedSchema is not an object")
    fields = fields_from_schema(schema)
    return Question(id="", kind="form", message=message, fields=fields, source=source, key=key, extra=extra, ttl=ttl)


def elicit_response(question: Question) -> dict[str, Any]:
    """The ``ElicitResult`` (wire form) for a decided or lapsed question."""
    if question.decision == "accept":
        if question.kind == "form":
            return {"action": "accept", "content": dict(question.answer or {})}
        return {"action": "accept"}
    if question.decision == "decline":
        return {"action": "decline"}
    return {"action": "cancel"}
