"""The Agents SDK agent check_openai-agents.py parks, and the bridge a `tarry worker` process carries it on with.

Its model is the SDK's own ``ScriptedModel`` (no network), each step answering from the call's input: it
calls ``refund`` and ``wire`` (both need approval), then says what each returned. Each refund appends a
line to the file ``REFUNDS_FILE`` names, so the script counts the refunds made by every process.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from agents import Agent, function_tool, set_tracing_disabled
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call

from tarry.bridges.openai_agents import OpenAIAgentsBridge

FINAL = "Refunded A17; Account B is closed"
"""The chat's last message once the refund was approved and the wire declined with a note."""

set_tracing_disabled(True)


def turn(call: ModelCall) -> list[Any]:
    """Call both tools; once their outputs are in, say what each returned."""
    outputs = [item["output"] for item in call.input if item.get("type") == "function_call_output"]
    if outputs:
        return [assistant_message("; ".join(outputs))]
    return [function_call("refund", {"order": "A17"}, call_id="c1"), function_call("wire", {"to": "B"}, call_id="c2")]


@function_tool(needs_approval=True)
def refund(order: str) -> str:
    """Refund an order."""
    with Path(os.environ["REFUNDS_FILE"]).open("a") as refunds:
        refunds.write(f"{order}\n")
    return f"Refunded {order}"


@function_tool(needs_approval=True)
def wire(to: str) -> str:
    """Wire money to an account."""
    return f"Wired to {to}"


agent = Agent(name="clerk", model=ScriptedModel([ModelStep.respond(turn)] * 4), tools=[refund, wire])
bridge = OpenAIAgentsBridge(agent, name="clerk")
agents = [bridge.agent]
"""What `tarry worker --agents sdk_bridged:agents` serves."""
