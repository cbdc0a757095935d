"""Opt-in end-to-end test of OpenAICompatible against llama-cpp-python's OpenAI-compatible server.

It runs when TARRY_TEST_LLAMA_URL points at such a server (e.g. http://127.0.0.1:8000/v1);
docs/models.md says how to start one with Gemma 3 270M.
"""

from __future__ import annotations

import os

import pytest

from tarry import Chat, Tool
from tarry.models import OpenAICompatible


class GetWeather(Tool):
    """Tells the weather in a city."""

    requires_approval = True

    def execute(self, city: str) -> str:
        return f"It is sunny in {city}."


async def test_a_forced_call_that_needs_approval_parks_and_the_chat_carries_on() -> None:
    url = os.environ.get("TARRY_TEST_LLAMA_URL")
    if not url:
        pytest.skip("end-to-end llama.cpp test: set TARRY_TEST_LLAMA_URL to a llama-cpp-python server's /v1 URL")
    model = OpenAICompatible(os.environ.get("TARRY_TEST_LLAMA_MODEL", "gemma-3-270m"), base_url=url, provider="llama")
    chat = Chat(
        model=model, tools=[GetWeather()], tool_choice="get_weather", settings={"max_tokens": 48, "temperature": 0}
    )

    parked = await chat.ask("What is the weather in Paris?")

    assert chat.waiting
    assert parked is not None
    (call,) = parked.tool_calls
    assert call.name == "get_weather"
    (approval,) = await chat.pending_questions()
    assert approval.kind == "approval"
    assert await chat.approve(approval)

    answer = await chat.complete()

    result = chat.messages[2]
    assert result.role == "tool"
    assert result.tool_call_id == call.id
    assert result.content.startswith("It is sunny in")
    # The chat carried on: the model was asked again with the result (a 270M base model's
    # words are not worth checking, and unforced it may even call the tool once more).
    assert answer is not None
    assert answer is chat.messages[3]
    assert answer.role == "assistant"
