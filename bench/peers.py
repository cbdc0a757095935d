"""pydantic-ai and the OpenAI Agents SDK in the store benchmark's workload, each persisting its own way.

Both run the workload of ``store_bench.TarrySide``: the model calls ``transfer`` (needs approval), the run
stops, what the library gives to resume it is saved; then a fresh agent loads it, approves, and carries on
to the final reply "Done.", which is saved too. Their models are scripted (no network). Neither library
has a database layer of its own for this, so each saves its serialised state as one row per chat, in a
SQLite file (WAL, ``synchronous=NORMAL`` as LangGraph's rows, or ``FULL`` in bench/full_sync.py) or a
PostgreSQL schema of its own.
"""

from __future__ import annotations

import importlib
import json
import sys
import uuid
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

PEERS = {"pydantic-ai": "pydantic_ai", "OpenAI Agents SDK": "agents"}
VERSIONS = {"pydantic-ai": "pydantic-ai-slim", "OpenAI Agents SDK": "openai-agents"}
CALL = {"amount": 5, "to": "Bob"}


def missing(peer: str) -> str | None:
    """None if ``peer`` can be imported, else why not (printed with how to install it)."""
    try:
        importlib.import_module(PEERS[peer])
    except ImportError as error:
        print(f'{peer} not measured ({error}); install it with: pip install -e ".[bench]"', file=sys.stderr)
        return str(error)
    return None


class Blobs:
    """One text value per key in a table of its own: how an application without a checkpointer saves a run."""

    def __init__(self, connection: Any, sqlite: bool) -> None:
        self.connection = connection
        self.sqlite = sqlite

    @classmethod
    async def open(cls, stack: AsyncExitStack, where: str | Path, synchronous: str = "NORMAL") -> Blobs:
        """A SQLite file (a ``Path``, at ``PRAGMA synchronous`` as given) or a PostgreSQL URL, its table created."""
        if isinstance(where, Path):
            import aiosqlite

            connection = await stack.enter_async_context(aiosqlite.connect(where, isolation_level=None))
            await connection.execute("PRAGMA journal_mode=WAL")
            await connection.execute(f"PRAGMA synchronous={synchronous}")
            await connection.execute("CREATE TABLE IF NOT EXISTS runs (id TEXT PRIMARY KEY, state TEXT NOT NULL)")
            return cls(connection, True)
        import psycopg

        connection = await stack.enter_async_context(await psycopg.AsyncConnection.connect(where, autocommit=True))
        await connection.execute("CREATE TABLE IF NOT EXISTS runs (id TEXT PRIMARY KEY, state TEXT NOT NULL)")
        return cls(connection, False)

    async def save(self, key: str, state: str) -> None:
        """Insert or replace the value of ``key``: one statement, one commit."""
        if self.sqlite:
            sql = "INSERT INTO runs VALUES (?, ?) ON CONFLICT (id) DO UPDATE SET state = excluded.state"
        else:
            sql = "INSERT INTO runs VALUES (%s, %s) ON CONFLICT (id) DO UPDATE SET state = excluded.state"
        await self.connection.execute(sql, (key, state))

    async def load(self, key: str) -> str:
        """The value of ``key``."""
        cursor = await self.connection.execute(
            "SELECT state FROM runs WHERE id = ?" if self.sqlite else "SELECT state FROM runs WHERE id = %s", (key,)
        )
        row = await cursor.fetchone()
        assert row is not None, key
        return str(row[0])


class PydanticAiSide:
    """A deferred tool (``requires_approval=True``); the message history saved as JSON, resumed with the approval."""

    def __init__(self, label: str, blobs: Blobs) -> None:
        self.label = label
        self.blobs = blobs
        self.run = uuid.uuid4().hex[:8]
        self.starter = self.agent()  # parking reuses one agent, as LangGraph's side reuses its compiled graph

    @staticmethod
    def agent() -> Any:
        from pydantic_ai import Agent, DeferredToolRequests
        from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
        from pydantic_ai.models.function import AgentInfo, FunctionModel

        def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            if any(isinstance(part, ToolReturnPart) for part in messages[-1].parts):
                return ModelResponse(parts=[TextPart("Done.")])
            return ModelResponse(parts=[ToolCallPart("transfer", dict(CALL), tool_call_id="call-1")])

        agent = Agent(FunctionModel(script), output_type=[str, DeferredToolRequests])

        @agent.tool_plain(requires_approval=True)
        def transfer(amount: int, to: str) -> str:
            """Moves money; needs approval."""
            return f"Sent {amount} to {to}"

        return agent

    async def park(self, number: int) -> None:
        from pydantic_ai import DeferredToolRequests

        result = await self.starter.run("Pay Bob 5")
        assert isinstance(result.output, DeferredToolRequests) and result.output.approvals
        await self.blobs.save(f"{self.run}-{number}", result.all_messages_json().decode())

    async def finish(self, number: int) -> None:
        from pydantic_ai import DeferredToolResults, ModelMessagesTypeAdapter
        from pydantic_ai.messages import ToolCallPart

        agent = self.agent()  # a fresh agent object, as a fresh process would build
        history = ModelMessagesTypeAdapter.validate_json(await self.blobs.load(f"{self.run}-{number}"))
        (call,) = [part for part in history[-1].parts if isinstance(part, ToolCallPart)]
        approvals = DeferredToolResults(approvals={call.tool_call_id: True})
        result = await agent.run(message_history=history, deferred_tool_results=approvals)
        assert result.output == "Done.", result.output
        await self.blobs.save(f"{self.run}-{number}", result.all_messages_json().decode())


class AgentsSdkSide:
    """A function tool with ``needs_approval=True``; the ``RunState`` saved as JSON, loaded, approved and run on."""

    def __init__(self, label: str, blobs: Blobs) -> None:
        self.label = label
        self.blobs = blobs
        self.run = uuid.uuid4().hex[:8]
        self.starter = self.agent()

    @staticmethod
    def agent() -> Any:
        from agents import Agent, function_tool

        @function_tool(needs_approval=True)
        def transfer(amount: int, to: str) -> str:
            """Moves money; needs approval."""
            return f"Sent {amount} to {to}"

        return Agent(name="payer", model=scripted_agents_model(), tools=[transfer])

    async def park(self, number: int) -> None:
        from agents import Runner

        result = await Runner.run(self.starter, "Pay Bob 5")
        assert result.interruptions
        await self.blobs.save(f"{self.run}-{number}", result.to_state().to_string())

    async def finish(self, number: int) -> None:
        from agents import Runner, RunState

        agent = self.agent()  # a fresh agent object, as a fresh process would build
        state = await RunState.from_string(agent, await self.blobs.load(f"{self.run}-{number}"))
        (pending,) = state.get_interruptions()
        state.approve(pending)
        result = await Runner.run(agent, state)
        assert result.final_output == "Done.", result.final_output
        await self.blobs.save(f"{self.run}-{number}", json.dumps(result.to_input_list(), default=str))


def scripted_agents_model() -> Any:
    """An Agents SDK ``Model`` that calls ``transfer`` first and says "Done." once it has the result."""
    from agents import ModelResponse, Usage
    from agents.models.interface import Model
    from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

    class Scripted(Model):
        async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> Any:
            answered = isinstance(input, list) and any(
                (item.get("type") if isinstance(item, dict) else getattr(item, "type", None)) == "function_call_output"
                for item in input
            )
            if answered:
                text = ResponseOutputText(type="output_text", text="Done.", annotations=[])
                output: Any = ResponseOutputMessage(
                    id="msg-1", type="message", role="assistant", status="completed", content=[text]
                )
            else:
                output = ResponseFunctionToolCall(
                    type="function_call", call_id="call-1", name="transfer", arguments=json.dumps(CALL), id="fc-1"
                )
            return ModelResponse(output=[output], usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError("the benchmark does not stream")

    return Scripted()


async def peer_sides(stack: AsyncExitStack, where: dict[str, str | Path], synchronous: str = "NORMAL") -> list[Any]:
    """A side for each importable peer in ``where`` (peer name: SQLite file, at ``synchronous``, or PostgreSQL URL)."""
    if "OpenAI Agents SDK" in where and not missing("OpenAI Agents SDK"):
        from agents import set_tracing_disabled

        set_tracing_disabled(True)  # tracing would export to OpenAI over the network
    sides: list[Any] = []
    for peer, place in where.items():
        if missing(peer):
            continue
        side = PydanticAiSide if peer == "pydantic-ai" else AgentsSdkSide
        sides.append(side(peer, await Blobs.open(stack, place, synchronous)))
    return sides
