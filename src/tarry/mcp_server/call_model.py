"""The model behind every served call: it makes exactly the tool call the MCP client asked for.

A served ``tools/call`` is a stored chat of one turn: the user message holds the call as JSON,
this model answers it with that one tool call, and, once the call has its result, with an
empty reply that ends the chat. It needs no provider, so any process (a worker, another server
process) rebuilds it from the chat's recorded agent and carries the call on.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any

from tarry.errors import TarryError
from tarry.messages import Message, ModelRequest, ToolCall

MODEL_NAME = "tarry:mcp-call"


def call_text(tool: str, arguments: Mapping[str, Any]) -> str:
    """The user message that asks for one call of ``tool`` with ``arguments``."""
    return json.dumps({"tool": tool, "arguments": dict(arguments)}, sort_keys=True)


class CallModel:
    """A [`Model`][tarry.messages.Model] that turns the call in the user message into a tool call."""

    name = MODEL_NAME

    async def complete(self, request: ModelRequest) -> Message:
        """The tool call the last user message asks for, or an empty reply once its result is in."""
        last = request.messages[-1] if request.messages else None
        if last is None or last.role != "user":
            return Message("assistant", "")
        try:
            asked = json.loads(last.content)
            tool, arguments = asked["tool"], asked["arguments"]
        except (ValueError, KeyError, TypeError) as error:
            raise TarryError(f"A served call's message is not a call: {last.content[:80]!r}") from error
        return Message("assistant", "", tool_calls=(ToolCall(f"mcp-{uuid.uuid4().hex}", tool, arguments),))
