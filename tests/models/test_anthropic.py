"""The Anthropic adapter against Anthropic's messages wire format, driven through a Chat."""

from __future__ import annotations

import json
import sys
from typing import Any

import httpx
import pytest
import respx

from tarry import Chat, Message, ToolCall, Usage
from tarry.errors import AuthenticationError, ContextLengthError, ProviderError, RateLimitError
from tarry.messages import MessageDone, TextDelta, ToolCallEvent
from tarry.models import Anthropic

from .conftest import TRANSFER_SCHEMA, WEATHER_SCHEMA, TransferMoney, get_weather, sent, sse

URL = "https://api.anthropic.com/v1/messages"


def reply(*blocks: dict[str, Any], usage: tuple[int, int] = (10, 5), **extra_usage: int) -> dict[str, Any]:
    """A message as Anthropic documents it."""
    return {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-6",
        "content": list(blocks),
        "stop_reason": "tool_use" if any(block["type"] == "tool_use" for block in blocks) else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": usage[0], "output_tokens": usage[1], **extra_usage},
    }


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def tool_use(id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": id, "name": name, "input": arguments}


def weather_chat(model: Anthropic) -> Chat:
    return Chat(
        model=model,
        tools=[get_weather],
        instructions="Answer in one sentence.",
        settings={
            "temperature": 0.2,
            "max_tokens": 200,
            "stop": "END",
            "seed": 7,
            "top_k": 5,
            "metadata": {"user_id": "u-1"},
        },
    )


def weather_turns() -> list[httpx.Response]:
    return [
        httpx.Response(
            200,
            json=reply(
                text("Let me look."),
                tool_use("toolu_1", "get_weather", {"city": "Paris"}),
                tool_use("toolu_2", "get_weather", {"city": "Rome"}),
                usage=(40, 12),
            ),
        ),
        httpx.Response(200, json=reply(text("Paris is sunny, Rome is cloudy."), usage=(80, 9))),
    ]


EXPECTED_TRANSCRIPT = [
    Message("user", "Weather in Paris and Rome?"),
    Message(
        "assistant",
        "Let me look.",
        tool_calls=(
            ToolCall("toolu_1", "get_weather", {"city": "Paris"}),
            ToolCall("toolu_2", "get_weather", {"city": "Rome"}),
        ),
        usage=Usage(40, 12),
    ),
    Message("tool", "sunny, 21°C", tool_call_id="toolu_1"),
    Message("tool", "cloudy, 18°C", tool_call_id="toolu_2"),
    Message("assistant", "Paris is sunny, Rome is cloudy.", usage=Usage(80, 9)),
]


async def test_a_chat_sends_tools_system_and_settings_and_groups_results(http: respx.MockRouter) -> None:
    route = http.post(URL).mock(side_effect=weather_turns())
    chat = weather_chat(Anthropic("claude-sonnet-4-6", api_key="sk-ant-test"))

    answer = await chat.ask("Weather in Paris and Rome?")

    assert answer == EXPECTED_TRANSCRIPT[-1]
    assert chat.messages == EXPECTED_TRANSCRIPT
    headers = route.calls[0].request.headers
    assert "sk-ant-test" in headers.get("x-api-key", headers.get("authorization", ""))
    assert sent(route, 0) == {
        "model": "claude-sonnet-4-6",
        "max_tokens": 200,
        "messages": [{"role": "user", "content": "Weather in Paris and Rome?"}],
        "system": "Answer in one sentence.",
        "tools": [
            {"name": "get_weather", "description": "Tells the weather in a city.", "input_schema": WEATHER_SCHEMA}
        ],
        "temperature": 0.2,
        "stop_sequences": ["END"],
        "top_k": 5,
        "metadata": {"user_id": "u-1"},
    }
    assert sent(route, 1)["messages"][1:] == [
        {
            "role": "assistant",
            "content": [
                text("Let me look."),
                tool_use("toolu_1", "get_weather", {"city": "Paris"}),
                tool_use("toolu_2", "get_weather", {"city": "Rome"}),
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny, 21°C"},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": "cloudy, 18°C"},
            ],
        },
    ]


async def test_max_tokens_has_a_default_because_anthropic_requires_one(http: respx.MockRouter) -> None:
    route = http.post(URL).mock(return_value=httpx.Response(200, json=reply(text("Hello."))))
    chat = Chat(model=Anthropic("claude-sonnet-4-6", api_key="sk-ant-test", max_tokens=321))

    await chat.ask("Hi")

    assert sent(route) == {
        "model": "claude-sonnet-4-6",
        "max_tokens": 321,
        "messages": [{"role": "user", "content": "Hi"}],
    }


async def test_cached_input_tokens_count_as_input(http: respx.MockRouter) -> None:
    http.post(URL).mock(
        return_value=httpx.Response(
            200, json=reply(text("Hello."), usage=(10, 5), cache_read_input_tokens=100, cache_creation_input_tokens=7)
        )
    )
    chat = Chat(model=Anthropic("claude-sonnet-4-6", api_key="sk-ant-test"))

    answer = await chat.ask("Hi")

    assert answer is not None
    assert answer.usage == Usage(input_tokens=117, output_tokens=5)


async def test_an_approved_call_carries_on_and_a_declined_one_is_an_error_result(http: respx.MockRouter) -> None:
    route = http.post(URL).mock(
        side_effect=[
            httpx.Response(
                200,
                json=reply(
                    tool_use("toolu_1", "transfer_money", {"amount": 5, "to": "Bob"}),
                    tool_use("toolu_2", "transfer_money", {"amount": 500, "to": "Eve"}),
                ),
            ),
            httpx.Response(200, json=reply(text("Bob is paid; Eve is not."))),
        ]
    )
    chat = Chat(model=Anthropic("claude-sonnet-4-6", api_key="sk-ant-test"), tools=[TransferMoney()])

    await chat.ask("Pay Bob 5 and Eve 500")

    assert chat.waiting
    assert route.call_count == 1
    assert sent(route, 0)["tools"][0]["input_schema"] == TRANSFER_SCHEMA
    bob, eve = await chat.pending_questions()
    assert await chat.approve(bob)
    assert await chat.decline(eve, "Too much")
    answer = await chat.complete()

    assert answer is not None
    assert answer.content == "Bob is paid; Eve is not."
    results = sent(route, 1)["messages"][2]
    assert results["role"] == "user"
    assert results["content"][0] == {"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sent 5 to Bob"}
    declined = results["content"][1]
    assert declined["tool_use_id"] == "toolu_2"
    assert declined["is_error"] is True
    assert json.loads(declined["content"]) == {
        "error": "The user declined the transfer_money call.",
        "note": "Too much",
    }


@pytest.mark.parametrize(
    ("choice", "wire", "relaxed"),
    [
        ("required", {"type": "any"}, {"type": "auto"}),
        ("get_weather", {"type": "tool", "name": "get_weather"}, {"type": "auto"}),
    ],
)
async def test_a_forcing_tool_choice_is_sent_then_relaxed(
    http: respx.MockRouter, choice: str, wire: Any, relaxed: Any
) -> None:
    route = http.post(URL).mock(
        side_effect=[
            httpx.Response(200, json=reply(tool_use("toolu_1", "get_weather", {"city": "Paris"}))),
            httpx.Response(200, json=reply(text("Sunny."))),
        ]
    )
    chat = Chat(model=Anthropic("claude-sonnet-4-6", api_key="sk-ant-test"), tools=[get_weather], tool_choice=choice)

    await chat.ask("Weather in Paris?")

    assert sent(route, 0)["tool_choice"] == wire
    assert sent(route, 1)["tool_choice"] == relaxed


@pytest.mark.parametrize("choice", ["auto", "none"])
async def test_auto_and_none(http: respx.MockRouter, choice: str) -> None:
    route = http.post(URL).mock(return_value=httpx.Response(200, json=reply(text("Hello."))))
    chat = Chat(model=Anthropic("claude-sonnet-4-6", api_key="sk-ant-test"), tools=[get_weather], tool_choice=choice)

    await chat.ask("Hi")

    assert sent(route)["tool_choice"] == {"type": choice}


def message_start(input_tokens: int = 40) -> dict[str, Any]:
    """The ``message_start`` event of a streamed reply."""
    return {
        "type": "message_start",
        "message": {
            "id": "msg_01",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-6",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": input_tokens, "output_tokens": 1},
        },
    }


def block_start(index: int, block: dict[str, Any]) -> dict[str, Any]:
    """A ``content_block_start`` event."""
    return {"type": "content_block_start", "index": index, "content_block": block}


def delta(index: int, payload: dict[str, Any]) -> dict[str, Any]:
    """A ``content_block_delta`` event."""
    return {"type": "content_block_delta", "index": index, "delta": payload}


def stop(index: int) -> dict[str, Any]:
    """A ``content_block_stop`` event."""
    return {"type": "content_block_stop", "index": index}


def message_delta(reason: str, output_tokens: int) -> dict[str, Any]:
    """The ``message_delta`` event that ends a streamed reply."""
    return {
        "type": "message_delta",
        "delta": {"stop_reason": reason, "stop_sequence": None},
        "usage": {"output_tokens": output_tokens},
    }


def streamed_weather_turns() -> list[httpx.Response]:
    first = [
        message_start(),
        block_start(0, {"type": "text", "text": ""}),
        {"type": "ping"},
        delta(0, {"type": "text_delta", "text": "Let me "}),
        delta(0, {"type": "text_delta", "text": "look."}),
        stop(0),
        block_start(1, {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}),
        delta(1, {"type": "input_json_delta", "partial_json": ""}),
        delta(1, {"type": "input_json_delta", "partial_json": '{"city": '}),
        delta(1, {"type": "input_json_delta", "partial_json": '"Paris"}'}),
        stop(1),
        block_start(2, {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {}}),
        delta(2, {"type": "input_json_delta", "partial_json": '{"city": "Rome"}'}),
        stop(2),
        message_delta("tool_use", 12),
        {"type": "message_stop"},
    ]
    second = [
        message_start(input_tokens=80),
        block_start(0, {"type": "text", "text": ""}),
        delta(0, {"type": "text_delta", "text": "Paris is sunny, "}),
        delta(0, {"type": "text_delta", "text": "Rome is cloudy."}),
        stop(0),
        message_delta("end_turn", 9),
        {"type": "message_stop"},
    ]
    return [sse(first, named=True), sse(second, named=True)]


async def test_streaming_yields_deltas_and_calls_and_records_the_plain_transcript(http: respx.MockRouter) -> None:
    route = http.post(URL).mock(side_effect=weather_turns() + streamed_weather_turns())
    plain = weather_chat(Anthropic("claude-sonnet-4-6", api_key="sk-ant-test"))
    await plain.ask("Weather in Paris and Rome?")
    streamed = weather_chat(Anthropic("claude-sonnet-4-6", api_key="sk-ant-test"))

    events = [event async for event in streamed.stream("Weather in Paris and Rome?")]

    assert streamed.messages == plain.messages == EXPECTED_TRANSCRIPT
    assert [event for event in events if not isinstance(event, MessageDone)] == [
        TextDelta("Let me "),
        TextDelta("look."),
        ToolCallEvent(ToolCall("toolu_1", "get_weather", {"city": "Paris"})),
        ToolCallEvent(ToolCall("toolu_2", "get_weather", {"city": "Rome"})),
        TextDelta("Paris is sunny, "),
        TextDelta("Rome is cloudy."),
    ]
    for plain_number, stream_number in ((0, 2), (1, 3)):
        body = sent(route, stream_number)
        assert body.pop("stream") is True
        assert body == sent(route, plain_number)


def error(type_: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": type_, "message": message}, "request_id": "req_1"}


@pytest.mark.parametrize(
    ("response", "error_type", "status"),
    [
        (httpx.Response(401, json=error("authentication_error", "invalid x-api-key")), AuthenticationError, 401),
        (
            httpx.Response(
                400, json=error("invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum")
            ),
            ContextLengthError,
            400,
        ),
        (httpx.Response(500, json=error("api_error", "Internal server error")), ProviderError, 500),
        (httpx.Response(529, json=error("overloaded_error", "Overloaded")), ProviderError, 529),
    ],
)
async def test_errors_become_tarry_errors_and_leave_the_transcript(
    http: respx.MockRouter, response: httpx.Response, error_type: type[ProviderError], status: int
) -> None:
    http.post(URL).mock(return_value=response)
    chat = Chat(model=Anthropic("claude-sonnet-4-6", api_key="sk-ant-test", max_retries=0))

    with pytest.raises(error_type) as raised:
        await chat.ask("Hi")

    assert type(raised.value) is error_type
    assert raised.value.status == status
    assert raised.value.provider == "anthropic"
    assert json.loads(response.content)["error"]["message"] in str(raised.value)
    assert chat.messages == [Message("user", "Hi")]


async def test_a_rate_limit_carries_the_retry_after(http: respx.MockRouter) -> None:
    http.post(URL).mock(
        side_effect=[
            httpx.Response(
                429,
                headers={"retry-after": "30"},
                json=error("rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit"),
            ),
            httpx.Response(200, json=reply(text("Hello."))),
        ]
    )
    chat = Chat(model=Anthropic("claude-sonnet-4-6", api_key="sk-ant-test", max_retries=0))

    with pytest.raises(RateLimitError) as raised:
        await chat.ask("Hi")

    assert raised.value.retry_after == 30.0
    assert "per-minute rate limit" in str(raised.value)
    assert chat.messages == [Message("user", "Hi")]
    assert await chat.complete() == Message("assistant", "Hello.", usage=Usage(10, 5))


async def test_an_error_inside_the_stream_is_a_tarry_error_and_records_nothing(http: respx.MockRouter) -> None:
    start = streamed_weather_turns()[0].content.decode().split("\n\n")[0] + "\n\n"
    failure = (
        'event: error\ndata: {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}\n\n'
    )
    http.post(URL).mock(
        return_value=httpx.Response(200, headers={"content-type": "text/event-stream"}, content=start + failure)
    )
    chat = Chat(model=Anthropic("claude-sonnet-4-6", api_key="sk-ant-test", max_retries=0))

    with pytest.raises(ProviderError, match="Overloaded"):
        async for _ in chat.stream("Hi"):
            pass

    assert chat.messages == [Message("user", "Hi")]


async def test_overloads_are_retried_by_the_sdk(http: respx.MockRouter) -> None:
    route = http.post(URL).mock(
        side_effect=[
            httpx.Response(529, headers={"retry-after-ms": "1"}, json=error("overloaded_error", "Overloaded")),
            httpx.Response(200, json=reply(text("Hello."))),
        ]
    )
    chat = Chat(model=Anthropic("claude-sonnet-4-6", api_key="sk-ant-test", max_retries=1))

    assert await chat.ask("Hi") == Message("assistant", "Hello.", usage=Usage(10, 5))
    assert route.call_count == 2


async def test_the_model_string_resolves_and_a_missing_key_is_an_authentication_error() -> None:
    chat = Chat(model="anthropic:claude-sonnet-4-6")

    assert isinstance(chat.model, Anthropic)
    assert chat.model.name == "anthropic:claude-sonnet-4-6"
    with pytest.raises(AuthenticationError, match="ANTHROPIC_API_KEY"):
        await chat.ask("Hi")
    assert chat.messages == [Message("user", "Hi")]


def test_a_missing_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "anthropic", None)

    with pytest.raises(ImportError, match=r"pip install 'tarry\[anthropic\]'"):
        Anthropic("claude-sonnet-4-6")
