"""Every ```python block of docs/models.md runs, in order, against recorded provider responses."""

from __future__ import annotations

import ast
import inspect
import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx

from .conftest import sse
from .test_anthropic import URL as ANTHROPIC_URL
from .test_gemini import URL as GEMINI_URL
from .test_gemini import function_call, response
from .test_openai import URL as OPENAI_URL
from .test_openai import call, completion

DOC = Path(__file__).parents[2] / "docs" / "models.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)


def openai_answers() -> Any:
    jokes = iter([httpx.Response(429, headers={"retry-after": "20"}, json={"error": {"message": "Slow down"}})])

    def answer(request: httpx.Request) -> httpx.Response:
        last = json.loads(request.content)["messages"][-1]
        if last["role"] == "tool":
            return httpx.Response(200, json=completion("It is sunny in Paris, 21°C."))
        if last["content"] == "Tell me a joke":
            return next(jokes, httpx.Response(200, json=completion("Why did the chat wait? It needed approval.")))
        return httpx.Response(200, json=completion(None, [call("call_1", "get_weather", {"city": "Paris"})]))

    return answer


def anthropic_answers(request: httpx.Request) -> httpx.Response:
    body = json.loads(request.content)
    assert body["stream"] is True
    start = {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 20, "output_tokens": 1},
        },
    }
    events: list[dict[str, Any]] = [
        start,
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    ]
    if isinstance(body["messages"][-1]["content"], str):
        events += [
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Let me check. "}},
            {"type": "content_block_stop", "index": 0},
            {
                "type": "content_block_start",
                "index": 1,
                "content_block": {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}},
            },
            {
                "type": "content_block_delta",
                "index": 1,
                "delta": {"type": "input_json_delta", "partial_json": '{"city": "Rome"}'},
            },
            {"type": "content_block_stop", "index": 1},
        ]
    else:
        events += [
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Sunny in Rome."}},
            {"type": "content_block_stop", "index": 0},
        ]
    events += [
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": 9},
        },
        {"type": "message_stop"},
    ]
    return sse(events, named=True)


def gemini_answers(request: httpx.Request) -> httpx.Response:
    last = json.loads(request.content)["contents"][-1]
    if "functionResponse" in last["parts"][0]:
        return httpx.Response(200, json=response({"text": "Yes, 21°C in Rome."}))
    return httpx.Response(200, json=response(function_call("get_weather", {"city": "Rome"})))


async def test_the_examples_of_the_models_page_run(
    http: respx.MockRouter, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY"):
        monkeypatch.setenv(name, "key-for-the-docs")
    http.post(OPENAI_URL).mock(side_effect=openai_answers())
    http.post(ANTHROPIC_URL).mock(side_effect=anthropic_answers)
    http.post(GEMINI_URL).mock(side_effect=gemini_answers)
    blocks = python_blocks()
    assert len(blocks) == 6
    namespace: dict[str, Any] = {}

    for number, source in enumerate(blocks, 1):
        code = compile(source, f"{DOC.name} block {number}", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        result = eval(code, namespace)
        if inspect.iscoroutine(result):
            await result

    assert capsys.readouterr().out.splitlines() == [
        "It is sunny in Paris, 21°C.",
        "Usage(input_tokens=10, output_tokens=5)",
        "openai:gpt-4.1-mini anthropic:claude-sonnet-4-6 gemini:gemini-2.5-flash "
        "openrouter:meta-llama/llama-3.3-70b-instruct",
        "Yes, 21°C in Rome.",
        "Let me check. [calling get_weather with {'city': 'Rome'}]",
        "Sunny in Rome.",
        "Slow down: try again in 20.0 s",
        "1",
        "Why did the chat wait? It needed approval.",
    ]
    assert namespace["local"].name == "llama:gemma-3-270m"
    assert namespace["chat"].tool_choice == "get_weather"
