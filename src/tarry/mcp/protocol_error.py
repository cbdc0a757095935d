"""``ProtocolError``: how a served tool fails its MCP call with a JSON-RPC error instead of a tool result."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tarry.errors import ToolCallError

PROTOCOL_ERROR = "protocol_error"
"""The key of a call's error result that holds the JSON-RPC error object."""


class ProtocolError(ToolCallError):
    """Raise from a tool to fail its MCP call with the JSON-RPC error ``code``, ``message`` and ``data``.

    Any other exception a tool raises is a tool error (a ``CallToolResult`` with ``isError``,
    which the model reads). This one says the request itself failed: a call answered at once
    gets the JSON-RPC error, and a call that runs as a task ends ``failed`` with it (2026-07-28
    ``tasks/get`` inlines it as ``error``; 2025-11-25 ``tasks/result`` answers with it). In a
    chat with a model, the call's result is ``{"error": message, "protocol_error": {...}}``.
    """

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        if isinstance(code, bool) or not isinstance(code, int):
            raise ValueError(f"A JSON-RPC error code is an integer, got {code!r}")
        error: dict[str, Any] = {"code": code, "message": message}
        if data is not None:
            error["data"] = data
        super().__init__(message, **{PROTOCOL_ERROR: error})
        self.code = code
        self.data = data


def protocol_error_of(result: Mapping[str, Any]) -> dict[str, Any] | None:
    """The JSON-RPC error object a call's error result carries (see [`ProtocolError`][tarry.mcp.ProtocolError]), else
    ``None``."""
    error = result.get(PROTOCOL_ERROR)
    if isinstance(error, Mapping) and isinstance(error.get("code"), int) and isinstance(error.get("message"), str):
        return dict(error)
    return None
