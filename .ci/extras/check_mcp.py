"""`tarry[mcp]` alone, both ways over stdio: tarry's client calls a tool of a server written with the SDK,
and the SDK's client calls tools of `tarry mcp serve`, one of which asks a question (an elicitation).
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path
from typing import Any

import mcp_types as types
from common import from_the_wheel, passed

from mcp import Client, StdioServerParameters
from tarry import Chat, Message
from tarry.mcp import MCPServer
from tarry.testing import ScriptedModel

HERE = Path(__file__).resolve().parent


async def tarry_as_client() -> None:
    def turn(messages: list[Message]) -> Any:
        if messages[-1].role == "user":
            return [{"name": "multiply", "arguments": {"a": 6, "b": 7}}]
        return f"Done: {messages[-1].content}"

    async with MCPServer(command=[sys.executable, str(HERE / "mcp_tools.py")]) as sums:
        chat = Chat(model=ScriptedModel([turn] * 3), tools=[sums])
        await chat.ask("6 times 7?")
        assert chat.messages[-1].content == "Done: 42", chat.messages


async def tarry_as_server() -> None:
    url = f"sqlite:///{Path(tempfile.mkdtemp()) / 'served.db'}"
    tarry = str(Path(sys.executable).with_name("tarry"))
    command = StdioServerParameters(
        command=tarry,
        args=["mcp", "serve", "--stdio", "--tools", "mcp_tools:TOOLS", "--url", url],
        cwd=str(HERE),
    )
    asked: list[str] = []

    async def person(context: Any, params: Any) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"colour": "blue"})

    async with Client(command, elicitation_callback=person) as client:
        names = {listed.name for listed in (await client.list_tools()).tools}
        assert names == {"add", "pick_colour"}, names
        assert (await client.call_tool("add", {"a": 2, "b": 3})).content[0].text == "5"
        painted = await client.call_tool("pick_colour", {"wall": "north"})
        assert painted.content[0].text == "north: blue", painted
    assert asked == ["Which colour?"], asked


if __name__ == "__main__":
    from_the_wheel()
    asyncio.run(tarry_as_client())
    asyncio.run(tarry_as_server())
    passed(
        "mcp", "tarry called an SDK server's tool; the SDK's client called `tarry mcp serve`'s, answering its question"
    )
