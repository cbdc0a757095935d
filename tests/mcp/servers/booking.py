"""An MCP server written with the official SDK, for tarry's tests.

Run: ``python booking.py [--legacy] [--http PORT]``. ``--legacy`` makes it refuse
``server/discover``, so it speaks 2025-11-25 only (questions are pushed with
``elicitation/create``); otherwise clients that prefer 2026-07-28 get input requests.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from typing import Annotated

from mcp.server.elicitation import ElicitationResult
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.resolve import Elicit, Resolve
from mcp.server.request_state import RequestStateSecurity
from mcp.shared.exceptions import MCPError
from mcp_types import METHOD_NOT_FOUND, CallToolRequestParams, RequestParams, ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field

KEY = b"tarry-tests-fixed-request-state!"  # fixed, so request state survives a server restart


class Party(BaseModel):
    size: int = Field(description="How many people", ge=1, le=12)


class Slot(BaseModel):
    time: str = Field(description="When", json_schema_extra={"enum": ["18:00", "20:00"]})
    terrace: bool = Field(default=False, description="Sit outside")


class Label(BaseModel):
    slug: str = Field(description="A slug", pattern=r"^(\w+\s?)*$")  # backtracks exponentially


class Code(BaseModel):
    model_config = ConfigDict(regex_engine="python-re")  # pydantic's own engine has no lookahead either

    code: str = Field(description="A code with a digit", pattern=r"^(?=.*\d).+$")  # a lookahead


def ask_label(restaurant: str) -> Elicit[Label]:
    return Elicit(f"Which slug for {restaurant}?", Label)


def ask_code(restaurant: str) -> Elicit[Code]:
    return Elicit(f"Which code for {restaurant}?", Code)


def ask_party(restaurant: str) -> Elicit[Party]:
    return Elicit(f"How many people for {restaurant}?", Party)


def ask_slot(party: Annotated[Party, Resolve(ask_party)]) -> Elicit[Slot]:
    return Elicit(f"Which time for {party.size}?", Slot)


server = MCPServer("booking", request_state_security=RequestStateSecurity(keys=[KEY]))


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def add(a: int, b: int) -> str:
    """Adds two numbers."""
    return str(a + b)


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True))
def delete_table(table: int) -> str:
    """Deletes a table."""
    return f"deleted {table}"


@server.tool()
def book(
    restaurant: str,
    party: Annotated[Party, Resolve(ask_party)],
    slot: Annotated[ElicitationResult[Slot], Resolve(ask_slot)],
) -> str:
    """Books a table, asking for the party size, then the time."""
    if slot.action != "accept":
        return f"No booking at {restaurant}: the time question was {slot.action}d"
    where = " on the terrace" if slot.data.terrace else ""
    return f"Booked {restaurant} for {party.size} at {slot.data.time}{where}"


@server.tool(annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True))
def quote(restaurant: str, party: Annotated[Party, Resolve(ask_party)]) -> str:
    """Quotes a table's price, asking for the party size; safe to call again."""
    return f"A table at {restaurant} for {party.size} costs {25 * party.size} euros"


@server.tool()
def label(restaurant: str, label: Annotated[Label, Resolve(ask_label)]) -> str:
    """Labels a booking, asking for a slug whose pattern backtracks exponentially."""
    return f"Labelled {restaurant} {label.slug!r}"


@server.tool()
def encode(restaurant: str, code: Annotated[Code, Resolve(ask_code)]) -> str:
    """Asks for a code whose pattern has a lookahead."""
    return f"Coded {restaurant} {code.code!r}"


@server.tool()
def fail() -> str:
    """Always fails."""
    raise ToolError("the oven is on fire")


@server.tool()
def refuse() -> str:
    """Answers with a JSON-RPC error whose code (-32000) is the one the SDK uses for a closed connection."""
    raise MCPError(-32000, "Bad Request: the quota is used up")


@server.tool()
def crash() -> str:
    """Kills the server process."""
    os._exit(3)


@server.tool()
async def hang() -> str:
    """Never answers."""
    await asyncio.Event().wait()
    return "never"


@server.tool()
def garbled() -> str:
    """Answers with a malformed result (see :func:`garble`)."""
    return "replaced by garble()"


# A task result (a shape the SDK lets through on 2026-07-28 connections) without a task id, in no known status.
GARBLED = {"resultType": "task", "status": "sleeping", "statusMessage": "secret-token-3141"}


def garble() -> None:
    """Make ``tools/call`` of ``garbled`` answer with a malformed task result (2026-07-28 only)."""
    entry = server._lowlevel_server.get_request_handler("tools/call")
    assert entry is not None

    async def call(ctx: object, params: CallToolRequestParams) -> object:
        if params.name == "garbled":
            return dict(GARBLED)
        return await entry.handler(ctx, params)

    server._lowlevel_server.add_request_handler("tools/call", entry.params_type, call)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--legacy", action="store_true")
    parser.add_argument("--http", type=int)
    options = parser.parse_args()
    garble()
    if options.legacy:

        async def no_discover(ctx: object, params: object) -> None:
            raise MCPError(METHOD_NOT_FOUND, "Method not found")

        server._lowlevel_server.add_request_handler("server/discover", RequestParams, no_discover)  # type: ignore[arg-type]
    if options.http:
        server.run("streamable-http", host="127.0.0.1", port=options.http)
    else:
        server.run()


if __name__ == "__main__":
    main()
