"""Commands the cross-process MCP tests run in real OS processes: ``python tests/mcp/proc.py CMD ...``.

Each command loads a stored chat whose tools come from one MCP server (given as JSON:
``{"command": [...]}`` or ``{"url": ...}``, plus ``MCPServer`` options), does one thing,
and prints the chat's state as JSON (``TARRY_TEST_LEASE`` sets the store's lease, in seconds).
tarry's and the MCP SDK's logs go to stderr at DEBUG (other libraries' at WARNING: a database
driver logs its SQL parameters at DEBUG), so the tests can check that no request state reaches
the logs.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from typing import Any

from tarry import Chat, Message
from tarry.mcp import MCPServer, McpTask
from tarry.mcp.oauth import OAuthLogin
from tarry.store import Store
from tarry.testing import ScriptedModel


def reactive_model(calls: list[dict[str, Any]]) -> ScriptedModel:
    """Makes ``calls`` after a user message; once the results are in, replies with the last result."""

    def turn(messages: list[Message]) -> Any:
        if messages[-1].role == "user":
            return calls
        return f"Done: {messages[-1].content}"

    return ScriptedModel([turn] * 20)


def state(chat: Chat) -> dict[str, Any]:
    """What the tests read back: the reply, whether calls wait, and the paused tasks' ids and kinds."""
    tasks = [record.task for record in chat.records.values() if record.open and isinstance(record.task, McpTask)]
    reply = chat.last_reply
    return {
        "reply": None if reply is None or reply.tool_calls else reply.content,
        "waiting": chat.waiting,
        "tasks": [{"kind": task.kind, "status": task.status, "task_id": task.task_id} for task in tasks],
    }


async def _open(url: str, chat_id: str, server: str, calls: str) -> tuple[Store, MCPServer, Chat]:
    store = Store(url, lease=float(os.environ.get("TARRY_TEST_LEASE", "60")))
    options = json.loads(server)
    login = options.pop("oauth", None)  # {"redirect_uri": ...}: the login kept in the store
    if login is not None:
        options["auth"] = OAuthLogin(store, options["url"], **login)
    mcp = MCPServer(**options)
    chat = await store.load_chat(chat_id, reactive_model(json.loads(calls)), [mcp])  # type: ignore[list-item]
    return store, mcp, chat


async def ask(url: str, chat_id: str, server: str, calls: str, text: str) -> None:
    """Ask ``text``: the model calls the tools; the command returns once the chat replied or parked."""
    store, mcp, chat = await _open(url, chat_id, server, calls)
    try:
        await chat.ask(text)
        print(json.dumps(state(chat)))
    finally:
        await mcp.close()
        await store.close()


async def carry(url: str, chat_id: str, server: str, calls: str) -> None:
    """One ``complete()``: retries calls whose questions were answered, checks on tasks once."""
    store, mcp, chat = await _open(url, chat_id, server, calls)
    try:
        await chat.complete()
        print(json.dumps(state(chat)))
    finally:
        await mcp.close()
        await store.close()


async def poll(url: str, chat_id: str, server: str, calls: str, within: str) -> None:
    """``complete()`` at the tasks' poll intervals until the chat replied or waits on a person."""
    store, mcp, chat = await _open(url, chat_id, server, calls)
    loop = asyncio.get_running_loop()
    end = loop.time() + float(within)
    try:
        while True:
            await chat.complete()
            tasks = await chat.pending_tasks()
            if not tasks or loop.time() > end:
                break
            await asyncio.sleep(min(task.poll_interval or 0.2 for task in tasks))
        print(json.dumps({**state(chat), "questions": len(await chat.pending_questions())}))
    finally:
        await mcp.close()
        await store.close()


async def cancel(url: str, chat_id: str, server: str, calls: str) -> None:
    """``chat.cancel()``: cancels the paused tasks (on the server too) and closes the waiting calls."""
    store, mcp, chat = await _open(url, chat_id, server, calls)
    try:
        await chat.cancel()
        print(json.dumps(state(chat)))
    finally:
        await mcp.close()
        await store.close()


COMMANDS = {"ask": ask, "carry": carry, "poll": poll, "cancel": cancel}

if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    for name in ("tarry", "mcp"):
        logging.getLogger(name).setLevel(logging.DEBUG)
    asyncio.run(COMMANDS[sys.argv[1]](*sys.argv[2:]))
