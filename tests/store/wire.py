"""Whether a transcript makes a valid request for every provider adapter, checked on the bodies they build.

No network: each adapter builds its request body from the transcript (as it would before
sending it) and the checks below hold it to the rule each provider enforces on tool calls.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Sequence
from typing import Any

from google.genai import types as genai_types

from tarry import Message, Tool
from tarry.messages import ModelRequest
from tarry.models.anthropic import Anthropic
from tarry.models.gemini import Gemini
from tarry.models.openai import OpenAI


def check_for_every_provider(messages: Sequence[Message], tools: Sequence[Tool]) -> None:
    """Fail unless every call has exactly one result and each provider's body pairs calls with results."""
    results = Counter(message.tool_call_id for message in messages if message.role == "tool")
    calls = [call.id for message in messages for call in message.tool_calls]
    assert Counter(calls) == Counter(set(calls)), f"a call id appears twice: {calls}"
    assert results == Counter(calls), f"calls and results differ: calls {calls}, results {dict(results)}"
    request = ModelRequest(messages=tuple(messages), tools=tuple(tool.schema() for tool in tools), tool_choice="auto")
    _check_openai(OpenAI("gpt-4.1-mini", api_key="unused").request_body(request)["messages"])
    _check_anthropic(Anthropic("claude-sonnet-4-6", api_key="unused").request_body(request)["messages"])
    _check_gemini(Gemini("gemini-2.5-flash", api_key="unused").request_arguments(request)["contents"])


def _check_openai(body: list[dict[str, Any]]) -> None:
    """Each assistant message with tool calls is followed at once by one tool message per call, and only then."""
    index = 0
    while index < len(body):
        entry = body[index]
        assert entry["role"] != "tool", f"openai: a tool message without its assistant message at {index}"
        index += 1
        wanted = [call["id"] for call in entry.get("tool_calls", ())]
        answered = [item.get("tool_call_id") for item in body[index : index + len(wanted)]]
        assert sorted(answered) == sorted(wanted), f"openai: calls {wanted} answered by {answered}"
        assert all(item["role"] == "tool" for item in body[index : index + len(wanted)])
        index += len(wanted)


def _check_anthropic(body: list[dict[str, Any]]) -> None:
    """Roles alternate from a user message; each turn's tool_use blocks are answered in the next user message."""
    roles = [entry["role"] for entry in body]
    assert roles[:1] == ["user"] and all(a != b for a, b in itertools.pairwise(roles)), roles
    for number, entry in enumerate(body):
        blocks = entry["content"] if isinstance(entry["content"], list) else []
        uses = [block["id"] for block in blocks if block["type"] == "tool_use"]
        if entry["role"] == "user":
            before = body[number - 1]["content"] if number else []
            asked = [block["id"] for block in before if block["type"] == "tool_use"] if isinstance(before, list) else []
            answered = [block["tool_use_id"] for block in blocks if block["type"] == "tool_result"]
            assert sorted(answered) == sorted(asked), f"anthropic: tool_use {asked} answered by {answered}"
            leading = [block["type"] for block in blocks[: len(answered)]]
            assert leading == ["tool_result"] * len(answered), "anthropic: tool results must come first"
        elif uses:
            assert number + 1 < len(body), f"anthropic: tool_use {uses} has no results"


def _check_gemini(contents: list[dict[str, Any]]) -> None:
    """Every content is a valid ``Content``; each model turn's function calls are answered by the next content."""
    for entry in contents:
        genai_types.Content.model_validate(entry)
    for number, entry in enumerate(contents):
        called = [part["function_call"]["name"] for part in entry["parts"] if "function_call" in part]
        if entry["role"] == "model" and called:
            after = contents[number + 1] if number + 1 < len(contents) else {"role": None, "parts": []}
            answered = [part["function_response"]["name"] for part in after["parts"] if "function_response" in part]
            assert after["role"] == "user" and sorted(answered) == sorted(called), (
                f"gemini: calls {called} answered by {answered}"
            )
