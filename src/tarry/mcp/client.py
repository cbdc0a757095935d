"""``MCPServer``: one MCP server (stdio or streamable HTTP) as a source of tools for chats."""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Literal

from tarry.mcp.connection import Connection, Protocol, Settings
from tarry.mcp.oauth import watch_logins
from tarry.mcp.tool import McpTool

ApprovalRule = bool | Collection[str] | Literal["unsafe"]


class MCPServer:
    """An MCP server whose tools a chat can call: ``Chat(tools=[MCPServer(command=[...])])``.

    Give ``command`` (a list: the program and its arguments, run over stdio, with ``env``
    added to a minimal environment and ``cwd``) or ``url`` (streamable HTTP, with
    ``headers``, and ``auth``: an ``httpx2.Auth`` such as the MCP SDK's
    ``mcp.client.auth.OAuthClientProvider``, or [`OAuthLogin`][tarry.mcp.OAuthLogin] to keep
    the login in tarry's store, for a server that requires OAuth). The
    connection opens on first use, in the running event loop, and speaks 2026-07-28 when
    the server offers it, else 2025-11-25 (``protocol="auto"``; ``"legacy"`` or
    ``"2026-07-28"`` force one).

    ``requires_approval`` is ``True``/``False``, a collection of tool names, or
    ``"unsafe"``: every tool the server does not mark read-only or non-destructive.
    ``timeout`` bounds each request in seconds (the clock stops while a person answers a
    server's question); ``question_ttl`` is how long a person has to answer one;
    ``task_ttl`` is the time to live tarry asks for a 2025-11-25 task; ``max_rounds`` caps
    the rounds of input requests of one call. ``name`` is what questions show as their
    source (default: the server's own name).
    """

    def __init__(
        self,
        command: Sequence[str] | None = None,
        *,
        url: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        headers: Mapping[str, str] | None = None,
        auth: Any = None,
        name: str | None = None,
        requires_approval: ApprovalRule = False,
        protocol: Protocol = "auto",
        timeout: float | None = 300.0,
        question_ttl: float | None = None,
        task_ttl: float | None = 3600.0,
        max_rounds: int = 10,
    ) -> None:
        if (command is None) == (url is None):
            raise ValueError("MCPServer takes command=[...] (stdio) or url=... (streamable HTTP), not both")
        if command is not None and (isinstance(command, str) or not command):
            raise TypeError("command must be a non-empty list: the program and its arguments")
        if auth is not None and url is None:
            raise ValueError("auth= is for servers reached over streamable HTTP (url=...)")
        if protocol not in ("auto", "legacy", "2026-07-28"):
            raise ValueError(f"protocol must be 'auto', 'legacy' or '2026-07-28', got {protocol!r}")
        named = not isinstance(requires_approval, str) and isinstance(requires_approval, Collection)
        if not (isinstance(requires_approval, bool) or requires_approval == "unsafe" or named):
            raise TypeError("requires_approval is True, False, 'unsafe' or a collection of tool names")
        self.requires_approval = requires_approval
        self.connection = Connection(
            Settings(
                command=list(command) if command is not None else None, url=url, env=dict(env or {}), cwd=cwd,
                headers=dict(headers or {}), auth=auth, name=name, protocol=protocol, timeout=timeout,
                question_ttl=question_ttl, task_ttl=task_ttl, max_rounds=max_rounds,
            )
        )  # fmt: skip
        """The transport: a connection per event loop, and the requests sent on it."""

    # What the server is

    @property
    def name(self) -> str:
        """The server's name as questions show it: ``name=``, else the server's own, else its command or host."""
        return self.connection.name

    @property
    def command(self) -> list[str] | None:
        """The program and its arguments (stdio), or ``None``."""
        return self.connection.settings.command

    @property
    def url(self) -> str | None:
        """The streamable HTTP endpoint, or ``None``."""
        return self.connection.settings.url

    @property
    def timeout(self) -> float | None:
        """Seconds each request may take (the clock stops while a person answers)."""
        return self.connection.settings.timeout

    @property
    def protocol_version(self) -> str | None:
        """The protocol version of the open connection, or ``None``."""
        return self.connection.protocol_version

    @property
    def modern(self) -> bool:
        """True when the open connection speaks 2026-07-28 (or later)."""
        return self.connection.modern

    def approval_for(self, tool_name: str, annotations: Mapping[str, Any]) -> bool:
        """Whether calls of the tool need a person's approval, by ``requires_approval``."""
        rule = self.requires_approval
        if rule == "unsafe":
            return not (annotations.get("readOnlyHint") is True or annotations.get("destructiveHint") is False)
        if isinstance(rule, bool):
            return rule
        return tool_name in rule

    async def list_tools(self) -> list[McpTool]:
        """The server's tools (a [`ToolSource`][tarry.tools.ToolSource])."""
        tools: list[McpTool] = []
        with watch_logins() as logins:
            try:
                specs = await self.connection.list_tools()
            except Exception:
                if logins:  # no call can wait for this login: a stored chat parks on it as a question of its own
                    raise logins[-1].named(self.name) from None
                raise
        for spec in specs:
            annotations = spec.get("annotations")
            rule = self.approval_for(spec["name"], annotations if isinstance(annotations, Mapping) else {})
            tools.append(McpTool(self.connection, spec, requires_approval=rule))
        return tools

    # The connection

    async def connect(self) -> None:
        """Open the connection now (it opens on first use otherwise).

        Raises [`LoginRequired`][tarry.mcp.LoginRequired] when the server needs a person to log in first.
        """
        with watch_logins() as logins:
            try:
                await self.connection.session()
            except Exception:
                if logins:
                    raise logins[-1].named(self.name) from None
                raise

    async def __aenter__(self) -> MCPServer:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connections of every event loop (stopping stdio servers); the next use opens a new one."""
        await self.connection.close()

    def __repr__(self) -> str:
        where = self.url if self.url is not None else " ".join(self.command or [])
        return f"<MCPServer {self.name!r} {where}>"
