"""The pydantic-ai agent the bridge tests park, decide and carry on, in this process and in others.

Its model (pydantic-ai's ``FunctionModel``, no network) calls ``refund`` (which needs approval) and,
when the prompt asks, ``lookup`` (which defers to a result given from outside); once results are in, it
replies with what each call returned, so a test reads what reached the model. Each run of ``refund``
appends a line to the file ``TARRY_TEST_REFUNDS`` names: its side effect, counted across processes.
A process whose ``TARRY_TEST_HANG_IN`` is ``refund`` (or ``reply``) hangs there, after its refund (or once the
model has the results), having written the file ``TARRY_TEST_HANG_MARK`` names, for a test to kill it.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from pydantic_ai import Agent, CallDeferred, DeferredToolRequests
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from tarry.agents import Agent as TarryAgent
from tarry.approvals import Approval
from tarry.bridges.pydantic_ai import PydanticAIBridge
from tarry.chat import Chat
from tarry.jobs import Worker
from tarry.store import Store
from tests.bridges.hang import hang_in

PROMPT = "Refund order A17 and look up its invoice"


def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Call the tools first; then say what each call returned."""
    last = messages[-1]
    returned = (
        [part for part in last.parts if isinstance(part, ToolReturnPart)] if isinstance(last, ModelRequest) else []
    )
    if returned:
        hang_in("reply")
        return ModelResponse(parts=[TextPart(" | ".join(f"{part.tool_name}: {part.content}" for part in returned))])
    prompt = str(messages[0].parts[-1].content) if isinstance(messages[0], ModelRequest) else ""
    if prompt == "Hello":
        return ModelResponse(parts=[TextPart("Hello! Which order?")])
    calls = [ToolCallPart("refund", {"order": "A17"})]
    if "look up" in prompt:
        calls.append(ToolCallPart("lookup", {"invoice_of": "A17"}))
    return ModelResponse(parts=calls)


def refunds_file() -> Path:
    """Where each run of ``refund`` leaves its line."""
    return Path(os.environ["TARRY_TEST_REFUNDS"])


def refunds_done() -> list[str]:
    """The refunds made so far, by every process."""
    path = refunds_file()
    return path.read_text().splitlines() if path.exists() else []


def make_agent() -> Agent[None, str | DeferredToolRequests]:
    """The pydantic-ai agent: ``refund`` needs approval, ``lookup`` defers its result."""
    agent: Agent[None, str | DeferredToolRequests] = Agent(
        FunctionModel(answer), output_type=[str, DeferredToolRequests]
    )

    @agent.tool_plain(requires_approval=True)
    def refund(order: str) -> str:
        """Refund an order."""
        with refunds_file().open("a") as refunds:
            refunds.write(f"{order} {os.getpid()}\n")
        hang_in("refund")
        return f"Refunded {order}"

    @agent.tool_plain
    def lookup(invoice_of: str) -> str:
        """Look an invoice up in the accounts system, which answers later."""
        raise CallDeferred(metadata={"system": "accounts"})

    return agent


def make_bridge(*, two_people: bool = False, ttl: float | None = None) -> PydanticAIBridge:
    """The bridge of the agent; ``two_people``: a refund needs two approvals."""
    approvals = {"refund": Approval(count=2)} if two_people else None
    return PydanticAIBridge(make_agent(), name="refunds", approvals=approvals, approval_ttl=ttl)


async def finished_by_a_worker(store: Store, chat_id: str, agent: TarryAgent) -> Chat:
    """The chat once a running [`Worker`][tarry.jobs.Worker] of ``agent`` carried it to its final reply (within a
    minute): a due chat is one a worker finds."""
    worker = Worker(store, [agent], poll_interval=0.05)
    running = asyncio.create_task(worker.run())
    deadline = time.monotonic() + 60
    try:
        while True:
            chat = await store.load_chat(chat_id, agent.make_model(), agent.tools)
            last = chat.messages[-1]
            if last.role == "assistant" and not last.tool_calls:
                return chat
            assert time.monotonic() < deadline, "no worker carried the chat to its end"
            await asyncio.sleep(0.02)
    finally:
        worker.stop()
        await running
