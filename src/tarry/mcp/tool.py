"""``McpTool``: one tool of an MCP server, as a chat sees it."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from tarry.errors import InvalidArgumentsError
from tarry.mcp import flow
from tarry.mcp.connection import Connection
from tarry.mcp.task import McpTask
from tarry.messages import ToolCall
from tarry.tasks import Task
from tarry.tools import Tool


class McpTool(Tool):
    """A tool an MCP server offers. The server validates the arguments; tarry only checks they are an object."""

    task_class = McpTask

    def __init__(self, connection: Connection, spec: Mapping[str, Any], *, requires_approval: bool = False) -> None:
        self.connection = connection
        """The server's transport the calls go through."""
        self.remote_name: str = spec["name"]
        """The server's name for the tool (``name`` may carry a chat's prefix)."""
        self.name = self.remote_name
        self.description = str(spec.get("description") or spec.get("title") or "")
        schema = spec.get("inputSchema")
        self._schema: dict[str, Any] = dict(schema) if isinstance(schema, Mapping) else {"type": "object"}
        self._schema.setdefault("properties", {})
        annotations = spec.get("annotations")
        self.annotations: dict[str, Any] = dict(annotations) if isinstance(annotations, Mapping) else {}
        execution = spec.get("execution")
        support = execution.get("taskSupport") if isinstance(execution, Mapping) else None
        self.task_support: str = support if support in ("optional", "required") else "forbidden"
        self.requires_approval = requires_approval
        self.idempotent = (
            self.annotations.get("idempotentHint") is True and self.annotations.get("readOnlyHint") is True
        )

    @property
    def parameters(self) -> dict[str, Any]:
        """The tool's ``inputSchema``, as the server sent it."""
        return copy.deepcopy(self._schema)

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The arguments as sent; the server checks them against its schema."""
        if not isinstance(arguments, Mapping):
            raise InvalidArgumentsError(f"Invalid arguments for {self.name}: expected an object")
        return dict(arguments)

    async def execute(self, **arguments: Any) -> Any:
        """Call the tool on the server; a result, or an [`McpTask`][tarry.mcp.McpTask] when the call waits."""
        return await flow.start(self.connection, self, arguments)

    async def resume(self, task: Task, **arguments: Any) -> Any:
        """Carry a waiting call on: retry with the answers, or check on the server's task."""
        if not isinstance(task, McpTask):
            raise TypeError(f"{self.name} resumes McpTask only, got {type(task).__name__}")
        task.steps = flow.Steps(self.connection)
        return await flow.carry_on(self.connection, self, task, arguments)

    def load_task(self, state: Mapping[str, Any], tool_call: ToolCall | None = None) -> Task:
        """Rebuild a saved [`McpTask`][tarry.mcp.McpTask], bound to this tool's server."""
        task = McpTask.load(state, tool_call=tool_call)
        task.steps = flow.Steps(self.connection)
        return task

    def __repr__(self) -> str:
        return f"<McpTool {self.name!r} of {self.connection.name!r}>"
