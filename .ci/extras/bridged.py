"""The pydantic-ai agent check_pydantic-ai.py parks, and the bridge a `tarry worker` process carries it on with.

Its model is pydantic-ai's ``FunctionModel`` (no network): it calls ``refund`` (needs approval) and
``invoice`` (a result from outside), then says what each returned. Each refund appends a line to the
file ``REFUNDS_FILE`` names, so the script counts the refunds made by every process.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic_ai import Agent, CallDeferred, DeferredToolRequests
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from tarry.bridges.pydantic_ai import PydanticAIBridge

FINAL = "refund: Refunded A17; invoice: INV-2041"
"""The chat's last message once the refund was approved and the invoice given."""


def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Call both tools; once their results are in, say what each returned."""
    returned = [part for part in messages[-1].parts if isinstance(part, ToolReturnPart)]
    if returned:
        return ModelResponse(parts=[TextPart("; ".join(f"{part.tool_name}: {part.content}" for part in returned))])
    return ModelResponse(parts=[ToolCallPart("refund", {"order": "A17"}), ToolCallPart("invoice", {"order": "A17"})])


agent: Agent[None, Any] = Agent(FunctionModel(model), output_type=[str, DeferredToolRequests])


@agent.tool_plain(requires_approval=True)
def refund(order: str) -> str:
    """Refund an order."""
    with Path(os.environ["REFUNDS_FILE"]).open("a") as refunds:
        refunds.write(f"{order}\n")
    return f"Refunded {order}"


@agent.tool_plain
def invoice(order: str) -> str:
    """The order's invoice number, which the accounts team gives."""
    raise CallDeferred()


bridge = PydanticAIBridge(agent, name="refunds")
agents = [bridge.agent]
"""What `tarry worker --agents bridged:agents` serves."""
