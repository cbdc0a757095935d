"""A server whose database refuses a write answers anyway: the client gets a JSON-RPC error, not a hang.

Every SSE event is a write (``tarry_stream_events``); when the write of a request's answer
failed, the SDK's message router of the session died with it and the client waited for ever.
Here a real ``tarry mcp serve`` process runs on SQLite and on PostgreSQL, and a trigger makes
the database refuse writes after the official SDK's client opened its session.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

import anyio
import psycopg
import pytest
from mcp.shared.exceptions import MCPError

from mcp import Client

from .conftest import ServerProcess

ANSWER_WITHIN = 60.0
"""Seconds the client waits for an answer; without the fix it waited for ever."""
REFUSAL = "refused by the test"
EVENTS = "tarry_stream_events"
CHATS = "tarry_chats"


def refuse_writes(database: str, table: str, when: str = "TRUE") -> None:
    """Make the database raise on every insert into ``table`` whose new row meets ``when``."""
    name = f"refuse_{table}"
    if database.startswith("sqlite:///"):
        with sqlite3.connect(database.removeprefix("sqlite:///")) as connection:
            connection.execute(
                f"CREATE TRIGGER {name} BEFORE INSERT ON {table} WHEN {when} "
                f"BEGIN SELECT RAISE(ABORT, '{REFUSAL}'); END"
            )
        return
    with psycopg.connect(database.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as connection:
        connection.execute(
            f"CREATE OR REPLACE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS "
            f"$$ BEGIN RAISE EXCEPTION '{REFUSAL}'; END $$"
        )
        connection.execute(
            f"CREATE TRIGGER {name} BEFORE INSERT ON {table} FOR EACH ROW WHEN ({when}) EXECUTE FUNCTION {name}()"
        )


def allow_writes(database: str, table: str) -> None:
    """Drop what :func:`refuse_writes` made for ``table``."""
    name = f"refuse_{table}"
    if database.startswith("sqlite:///"):
        with sqlite3.connect(database.removeprefix("sqlite:///")) as connection:
            connection.execute(f"DROP TRIGGER {name}")
        return
    with psycopg.connect(database.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as connection:
        connection.execute(f"DROP TRIGGER {name} ON {table}")


@pytest.mark.parametrize("database", ["sqlite", "postgresql"], indirect=True)
async def test_a_failed_write_reaches_the_client_as_an_error(
    database: str, start_server: Callable[..., ServerProcess]
) -> None:
    server = start_server()
    async with Client(server.url, mode="legacy") as client:
        # The call's own writes fail, and so does the write of the error that answers it.
        refuse_writes(database, CHATS)
        refuse_writes(database, EVENTS, when="NEW.message IS NOT NULL")
        with anyio.fail_after(ANSWER_WITHIN), pytest.raises(MCPError) as raised:
            await client.call_tool("add", {"a": 1, "b": 2})
        assert raised.value.error.code == -32603, raised.value.error
        assert "INSERT" not in raised.value.error.message  # the server's SQL stays in its log
        # The session still works: an answer whose event could not be kept still goes out (it cannot be resumed).
        allow_writes(database, CHATS)
        with anyio.fail_after(ANSWER_WITHIN):
            added = await client.call_tool("add", {"a": 2, "b": 3})
        assert added.content[0].text == "5"
