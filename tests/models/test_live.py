"""Opt-in live tests: each runs only when its provider's API key is set, and then reaches the network.

A forced call of a tool that needs approval parks, is approved and runs, and the model answers.
Model names can be changed with TARRY_LIVE_OPENAI_MODEL, TARRY_LIVE_ANTHROPIC_MODEL and
TARRY_LIVE_GEMINI_MODEL.
"""

from __future__ import annotations

import os

import pytest

from tarry import Chat, Tool

KEYS = {name: os.environ.get(name) for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY")}
"""Read at import: the tests' fixtures clear provider variables so mocked tests never see them."""
LIVE = [
    ("OPENAI_API_KEY", "openai", "TARRY_LIVE_OPENAI_MODEL", "gpt-4.1-mini"),
    ("ANTHROPIC_API_KEY", "anthropic", "TARRY_LIVE_ANTHROPIC_MODEL", "claude-haiku-4-5"),
    ("GEMINI_API_KEY", "gemini", "TARRY_LIVE_GEMINI_MODEL", "gemini-2.5-flash"),
]


class LookUpOrder(Tool):
    """Looks up the status of a customer's order by its number."""

    requires_approval = True

    def execute(self, order_number: int) -> str:
        return f"Order {order_number} shipped on Monday."


@pytest.mark.parametrize(("key", "provider", "override", "default"), LIVE, ids=[item[1] for item in LIVE])
async def test_a_real_model_calls_a_tool_that_waits_for_approval(
    key: str, provider: str, override: str, default: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    api_key = KEYS[key]
    if not api_key:
        pytest.skip(f"live {provider} test: set {key} to run it")
    monkeypatch.setenv(key, api_key)
    chat = Chat(
        model=f"{provider}:{os.environ.get(override, default)}",
        tools=[LookUpOrder()],
        instructions="You help customers. Use the tools you have.",
        tool_choice="look_up_order",
        settings={"max_tokens": 200, "temperature": 0},
    )

    parked = await chat.ask("Where is my order 4217?")

    assert parked is not None
    assert parked.usage is not None
    assert parked.usage.input_tokens > 0
    (call,) = parked.tool_calls
    assert call.name == "look_up_order"
    assert call.arguments == {"order_number": 4217}
    (approval,) = await chat.pending_questions()
    await chat.approve(approval)
    answer = await chat.complete()
    assert answer is not None
    assert answer.content.strip()
    assert chat.messages[2].content == "Order 4217 shipped on Monday."
