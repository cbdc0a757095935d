"""The OpenAI adapter against OpenAI's chat completions wire format, driven through a Chat."""

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
from tarry.models import OpenAI, OpenAICompatible

from .conftest import TRANSFER_SCHEMA, WEATHER_SCHEMA, TransferMoney, get_weather, sent, sse

URL = "https://api.openai.com/v1/chat/completions"


def completion(content: str | None = None, calls: list[dict[str, Any]] | None = None, usage: tuple[int, int] = (10, 5)):
    """A chat completion as OpenAI documents it."""
    message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
    if calls:
        message["tool_calls"] = calls
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "gpt-4.1-mini",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
        "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)},
    }


def call(id: str, name: str, arguments: dict[str, Any] | str) -> dict[str, Any]:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": id, "type": "function", "function": {"name": name, "arguments": text}}


def weather_turns() -> list[httpx.Response]:
    return [
        httpx.Response(
            200,
            json=completion(
                "Let me look.",
                [call("call_1", "get_weather", {"city": "Paris"}), call("call_2", "get_weather", {"city": "Rome"})],
                usage=(40, 12),
            ),
        ),
        httpx.Response(200, json=completion("Paris is sunny, Rome is cloudy.", usage=(80, 9))),
    ]


def weather_chat(model: OpenAI) -> Chat:
    return Chat(
        model=model,
        tools=[get_weather],
        instructions="Answer in one sentence.",
        settings={"temperature": 0.2, "max_tokens": 200, "stop": ["END"], "seed": 7, "top_k": 5, "user": "u-1"},
    )


EXPECTED_TRANSCRIPT = [
    Message("user", "Weather in Paris and Rome?"),
    Message(
        "assistant",
        "Let me look.",
        tool_calls=(
            ToolCall("call_1", "get_weather", {"city": "Paris"}),
            ToolCall("call_2", "get_weather", {"city": "Rome"}),
        ),
        usage=Usage(40, 12),
    ),
    Message("tool", "sunny, 21°C", tool_call_id="call_1"),
    Message("tool", "cloudy, 18°C", tool_call_id="call_2"),
    Message("assistant", "Paris is sunny, Rome is cloudy.", usage=Usage(80, 9)),
]


async def test_a_chat_sends_tools_instructions_and_settings_and_gets_calls_back(http: respx.MockRouter) -> None:
    route = http.post(URL).mock(side_effect=weather_turns())
    chat = weather_chat(OpenAI("gpt-4.1-mini", api_key="sk-test"))

    reply = await chat.ask("Weather in Paris and Rome?")

    assert reply == EXPECTED_TRANSCRIPT[-1]
    assert chat.messages == EXPECTED_TRANSCRIPT
    assert route.calls[0].request.headers["authorization"] == "Bearer sk-test"
    assert sent(route, 0) == {
        "model": "gpt-4.1-mini",
        "messages": [
            {"role": "system", "content": "Answer in one sentence."},
            {"role": "user", "content": "Weather in Paris and Rome?"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "Tells the weather in a city.",
                    "parameters": WEATHER_SCHEMA,
                },
            }
        ],
        "temperature": 0.2,
        "max_completion_tokens": 200,
        "stop": ["END"],
        "seed": 7,
        "user": "u-1",
    }
    assert sent(route, 1)["messages"][2:] == [
        {
            "role": "assistant",
            "content": "Let me look.",
            "tool_calls": [
                call("call_1", "get_weather", {"city": "Paris"}),
                call("call_2", "get_weather", {"city": "Rome"}),
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21°C"},
        {"role": "tool", "tool_call_id": "call_2", "content": "cloudy, 18°C"},
    ]


async def test_a_call_that_needs_approval_parks_and_carries_on_once_approved(http: respx.MockRouter) -> None:
    route = http.post(URL).mock(
        side_effect=[
            httpx.Response(200, json=completion(None, [call("call_9", "transfer_money", {"amount": 5, "to": "Bob"})])),
            httpx.Response(200, json=completion("Done: Bob has his 5.")),
        ]
    )
    chat = Chat(model=OpenAI("gpt-4.1-mini", api_key="sk-test"), tools=[TransferMoney()])

    parked = await chat.ask("Pay Bob 5")

    assert chat.waiting
    assert parked is not None
    assert parked.tool_calls == (ToolCall("call_9", "transfer_money", {"amount": 5, "to": "Bob"}),)
    assert route.call_count == 1
    assert sent(route, 0)["tools"][0]["function"]["parameters"] == TRANSFER_SCHEMA
    (question,) = await chat.pending_questions()
    assert question.kind == "approval"

    assert await chat.approve(question) is True
    reply = await chat.complete()

    assert reply is not None
    assert reply.content == "Done: Bob has his 5."
    assert not chat.waiting
    assert sent(route, 1)["messages"][1:] == [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [call("call_9", "transfer_money", {"amount": 5, "to": "Bob"})],
        },
        {"role": "tool", "tool_call_id": "call_9", "content": "Sent 5 to Bob"},
    ]


@pytest.mark.parametrize(
    ("choice", "wire"),
    [
        ("required", {"type": "function", "function": {"name": "get_weather"}}),
        ("get_weather", {"type": "function", "function": {"name": "get_weather"}}),
    ],
)
async def test_a_forcing_tool_choice_is_sent_then_relaxed_to_auto(
    http: respx.MockRouter, choice: str, wire: Any
) -> None:
    route = http.post(URL).mock(
        side_effect=[
            httpx.Response(200, json=completion(None, [call("call_1", "get_weather", {"city": "Paris"})])),
            httpx.Response(200, json=completion("Sunny.")),
        ]
    )
    chat = Chat(model=OpenAI("gpt-4.1-mini", api_key="sk-test"), tools=[get_weather], tool_choice=choice)

    await chat.ask("Weather in Paris?")

    assert sent(route, 0)["tool_choice"] == wire
    assert sent(route, 1)["tool_choice"] == "auto"


@pytest.mark.parametrize("choice", ["auto", "none"])
async def test_auto_and_none_go_out_as_they_are(http: respx.MockRouter, choice: str) -> None:
    route = http.post(URL).mock(return_value=httpx.Response(200, json=completion("Hello.")))
    chat = Chat(model=OpenAI("gpt-4.1-mini", api_key="sk-test"), tools=[get_weather], tool_choice=choice)

    await chat.ask("Hi")

    assert sent(route)["tool_choice"] == choice


async def test_a_chat_without_tools_sends_neither_tools_nor_a_choice(http: respx.MockRouter) -> None:
    route = http.post(URL).mock(return_value=httpx.Response(200, json=completion("Hello.")))
    chat = Chat(model=OpenAI("gpt-4.1-mini", api_key="sk-test"))

    await chat.ask("Hi")

    assert sent(route) == {"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": "Hi"}]}


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": "gpt-4.1-mini",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def usage_chunk(prompt: int, completion_tokens: int) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": "gpt-4.1-mini",
        "choices": [],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt + completion_tokens,
        },
    }


def fragment(index: int, *, id: str | None = None, name: str | None = None, arguments: str = "") -> dict[str, Any]:
    function: dict[str, Any] = {"arguments": arguments}
    if name:
        function["name"] = name
    item: dict[str, Any] = {"index": index, "function": function}
    if id:
        item.update(id=id, type="function")
    return {"tool_calls": [item]}


def streamed_weather_turns() -> list[httpx.Response]:
    return [
        sse(
            [
                chunk({"role": "assistant", "content": ""}),
                chunk({"content": "Let me "}),
                chunk({"content": "look."}),
                chunk(fragment(0, id="call_1", name="get_weather")),
                chunk(fragment(0, arguments='{"city": ')),
                chunk(fragment(0, arguments='"Paris"}')),
                chunk(fragment(1, id="call_2", name="get_weather", arguments='{"city": "Rome"}')),
                chunk({}, finish="tool_calls"),
                usage_chunk(40, 12),
            ],
            done="[DONE]",
        ),
        sse(
            [
                chunk({"role": "assistant", "content": "Paris is sunny, "}),
                chunk({"content": "Rome is cloudy."}),
                chunk({}, finish="stop"),
                usage_chunk(80, 9),
            ],
            done="[DONE]",
        ),
    ]


async def test_streaming_yields_deltas_and_calls_and_leaves_the_same_transcript(http: respx.MockRouter) -> None:
    route = http.post(URL).mock(side_effect=streamed_weather_turns())
    chat = weather_chat(OpenAI("gpt-4.1-mini", api_key="sk-test"))

    events = [event async for event in chat.stream("Weather in Paris and Rome?")]

    assert chat.messages == EXPECTED_TRANSCRIPT
    assert [event for event in events if not isinstance(event, MessageDone)] == [
        TextDelta("Let me "),
        TextDelta("look."),
        ToolCallEvent(ToolCall("call_1", "get_weather", {"city": "Paris"})),
        ToolCallEvent(ToolCall("call_2", "get_weather", {"city": "Rome"})),
        TextDelta("Paris is sunny, "),
        TextDelta("Rome is cloudy."),
    ]
    assert [event.message for event in events if isinstance(event, MessageDone)] == [
        EXPECTED_TRANSCRIPT[1],
        EXPECTED_TRANSCRIPT[4],
    ]
    first = sent(route, 0)
    assert first["stream"] is True
    assert first["stream_options"] == {"include_usage": True}
    assert first["messages"][0] == {"role": "system", "content": "Answer in one sentence."}
    assert route.call_count == 2


async def test_a_streamed_run_and_a_plain_run_record_the_same_transcript(http: respx.MockRouter) -> None:
    route = http.post(URL).mock(side_effect=weather_turns() + streamed_weather_turns())
    plain = weather_chat(OpenAI("gpt-4.1-mini", api_key="sk-test"))
    await plain.ask("Weather in Paris and Rome?")
    streamed = weather_chat(OpenAI("gpt-4.1-mini", api_key="sk-test"))
    async for _ in streamed.stream("Weather in Paris and Rome?"):
        pass

    assert streamed.messages == plain.messages
    plain_bodies = [sent(route, n) for n in (0, 1)]
    stream_bodies = [sent(route, n) for n in (2, 3)]
    for body in stream_bodies:
        assert body.pop("stream") is True
        assert body.pop("stream_options") == {"include_usage": True}
    assert stream_bodies == plain_bodies


def error_body(message: str, type_: str, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}


@pytest.mark.parametrize(
    ("response", "error_type", "status"),
    [
        (
            httpx.Response(
                401, json=error_body("Incorrect API key provided: sk-bad.", "invalid_request_error", "invalid_api_key")
            ),
            AuthenticationError,
            401,
        ),
        (
            httpx.Response(
                400,
                json=error_body(
                    "This model's maximum context length is 128000 tokens. "
                    "However, your messages resulted in 130000 tokens.",
                    "invalid_request_error",
                    "context_length_exceeded",
                ),
            ),
            ContextLengthError,
            400,
        ),
        (httpx.Response(500, json=error_body("The server had an error.", "server_error")), ProviderError, 500),
    ],
)
async def test_errors_become_tarry_errors_and_leave_the_transcript(
    http: respx.MockRouter, response: httpx.Response, error_type: type[ProviderError], status: int
) -> None:
    http.post(URL).mock(return_value=response)
    chat = Chat(model=OpenAI("gpt-4.1-mini", api_key="sk-bad", max_retries=0), tools=[get_weather])

    with pytest.raises(error_type) as raised:
        await chat.ask("Hi")

    assert type(raised.value) is error_type
    assert raised.value.status == status
    assert raised.value.provider == "openai"
    assert json.loads(response.content)["error"]["message"] in str(raised.value)
    assert chat.messages == [Message("user", "Hi")]


async def test_a_rate_limit_carries_the_retry_after_and_the_chat_can_try_again(http: respx.MockRouter) -> None:
    http.post(URL).mock(
        side_effect=[
            httpx.Response(
                429,
                headers={"retry-after": "12"},
                json=error_body("Rate limit reached for gpt-4.1-mini.", "requests", "rate_limit_exceeded"),
            ),
            httpx.Response(200, json=completion("Hello.")),
        ]
    )
    chat = Chat(model=OpenAI("gpt-4.1-mini", api_key="sk-test", max_retries=0))

    with pytest.raises(RateLimitError) as raised:
        await chat.ask("Hi")

    assert raised.value.retry_after == 12.0
    assert raised.value.status == 429
    assert "Rate limit reached for gpt-4.1-mini." in str(raised.value)
    assert chat.messages == [Message("user", "Hi")]
    reply = await chat.complete()
    assert reply == Message("assistant", "Hello.", usage=Usage(10, 5))
    assert chat.messages == [Message("user", "Hi"), reply]


async def test_server_errors_are_retried_by_the_sdk(http: respx.MockRouter) -> None:
    route = http.post(URL).mock(
        side_effect=[
            httpx.Response(500, headers={"retry-after-ms": "1"}, json=error_body("Overloaded.", "server_error")),
            httpx.Response(200, json=completion("Hello.")),
        ]
    )
    chat = Chat(model=OpenAI("gpt-4.1-mini", api_key="sk-test", max_retries=1))

    reply = await chat.ask("Hi")

    assert reply is not None
    assert reply.content == "Hello."
    assert route.call_count == 2


async def test_a_missing_api_key_is_an_authentication_error_when_the_model_is_called() -> None:
    chat = Chat(model="openai:gpt-4.1-mini")

    with pytest.raises(AuthenticationError, match="OPENAI_API_KEY"):
        await chat.ask("Hi")

    assert chat.messages == [Message("user", "Hi")]


async def test_model_strings_resolve_to_openai_and_ollama(
    http: respx.MockRouter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    openai_route = http.post(URL).mock(return_value=httpx.Response(200, json=completion("From OpenAI.")))
    ollama_route = http.post("http://127.0.0.1:11434/v1/chat/completions").mock(
        return_value=httpx.Response(200, json=completion("From Ollama."))
    )

    on_openai = Chat(model="openai:gpt-4.1-mini")
    on_ollama = Chat(model="ollama:llama3.2", settings={"max_tokens": 64, "top_k": 20})

    assert isinstance(on_openai.model, OpenAI)
    assert on_openai.model.name == "openai:gpt-4.1-mini"
    assert isinstance(on_ollama.model, OpenAICompatible)
    assert on_ollama.model.name == "ollama:llama3.2"
    assert (await on_openai.ask("Hi")) == Message("assistant", "From OpenAI.", usage=Usage(10, 5))
    assert (await on_ollama.ask("Hi")) == Message("assistant", "From Ollama.", usage=Usage(10, 5))
    assert openai_route.calls[0].request.headers["authorization"] == "Bearer sk-from-env"
    assert sent(ollama_route) == {
        "model": "llama3.2",
        "messages": [{"role": "user", "content": "Hi"}],
        "max_tokens": 64,
        "top_k": 20,
    }
    assert "sk-from-env" not in str(ollama_route.calls[0].request.headers)


async def test_an_openai_compatible_server_takes_its_own_key_and_url(http: respx.MockRouter) -> None:
    route = http.post("https://openrouter.example/api/v1/chat/completions").mock(
        return_value=httpx.Response(200, json=completion("Hi there."))
    )
    model = OpenAICompatible(
        "meta/llama-3", base_url="https://openrouter.example/api/v1", api_key="or-key", provider="openrouter"
    )
    chat = Chat(model=model)

    await chat.ask("Hi")

    assert model.name == "openrouter:meta/llama-3"
    assert route.calls[0].request.headers["authorization"] == "Bearer or-key"


async def test_arguments_that_are_not_json_reach_the_model_as_an_error(http: respx.MockRouter) -> None:
    route = http.post(URL).mock(
        side_effect=[
            httpx.Response(200, json=completion(None, [call("call_1", "get_weather", "{city: Paris")])),
            httpx.Response(200, json=completion("Sorry.")),
        ]
    )
    chat = Chat(model=OpenAI("gpt-4.1-mini", api_key="sk-test"), tools=[get_weather])

    await chat.ask("Weather in Paris?")

    result = chat.messages[2]
    assert result.role == "tool"
    assert "Invalid arguments for get_weather" in result.result()["error"]
    echoed = sent(route, 1)["messages"][1]["tool_calls"][0]["function"]["arguments"]
    assert echoed == "{city: Paris"


def test_a_missing_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "openai", None)

    with pytest.raises(ImportError, match=r"pip install 'tarry\[openai\]'"):
        OpenAI("gpt-4.1-mini")


def test_settings_cannot_override_what_the_chat_sends() -> None:
    from tarry.messages import ModelRequest

    model = OpenAI("gpt-4.1-mini", api_key="sk-test")

    with pytest.raises(ValueError, match="messages"):
        model.request_body(ModelRequest(messages=[Message("user", "Hi")], settings={"messages": []}))


LOCAL = "http://127.0.0.1:8080/v1"


def local_request(tool_choice: str | None = None, messages: tuple[Message, ...] = (Message("user", "Hi"),)) -> Any:
    from tarry.messages import ModelRequest

    tools = tuple(tool.schema() for tool in Chat(tools=[get_weather, TransferMoney()]).tools.values())
    return ModelRequest(messages=messages, tools=tools, tool_choice=tool_choice)


@pytest.mark.parametrize(("takes_required", "wire"), [(True, "required"), (False, "auto")])
def test_required_with_several_tools_follows_the_servers_setting(takes_required: bool, wire: str) -> None:
    model = OpenAICompatible("m", base_url=LOCAL, required_tool_choice=takes_required)

    assert model.request_body(local_request("required"))["tool_choice"] == wire


async def test_a_server_that_refuses_stream_options_is_streamed_without_them(http: respx.MockRouter) -> None:
    route = http.post(f"{LOCAL}/chat/completions").mock(
        return_value=sse([chunk({"role": "assistant", "content": "Hi."}, "stop")], done="[DONE]")
    )
    chat = Chat(model=OpenAICompatible("m", base_url=LOCAL, stream_usage=False))

    events = [event async for event in chat.stream("Hi")]

    assert "stream_options" not in sent(route)
    assert sent(route)["stream"] is True
    assert events[-1] == MessageDone(Message("assistant", "Hi."))


def test_call_ids_other_servers_made_are_sent_in_a_form_every_server_takes() -> None:
    long_id = "call__0_get_weather_cmpl-0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
    odd_id = "toolu:01/abc"
    fine_id = "call_" + "a" * 35
    transcript = (
        Message("user", "Weather?"),
        Message(
            "assistant",
            "",
            tool_calls=(
                ToolCall(long_id, "get_weather", {"city": "Paris"}),
                ToolCall(odd_id, "get_weather", {"city": "Rome"}),
                ToolCall(fine_id, "get_weather", {"city": "Oslo"}),
            ),
        ),
        Message("tool", "sunny", tool_call_id=long_id),
        Message("tool", "cloudy", tool_call_id=odd_id),
        Message("tool", "snow", tool_call_id=fine_id),
    )
    model = OpenAICompatible("m", base_url=LOCAL)

    sent_messages = model.request_body(local_request(messages=transcript))["messages"]

    ids = [entry["id"] for entry in sent_messages[1]["tool_calls"]]
    assert [entry["tool_call_id"] for entry in sent_messages[2:]] == ids
    assert ids[2] == fine_id
    assert len(set(ids)) == 3
    assert all(len(wire) <= 40 and wire.replace("_", "").replace("-", "").isalnum() for wire in ids)
    again = model.request_body(local_request(messages=transcript))["messages"]
    assert [entry["id"] for entry in again[1]["tool_calls"]] == ids


async def test_a_streamed_call_whose_name_is_repeated_in_every_fragment_keeps_one_name(http: respx.MockRouter) -> None:
    def fragment(arguments: str) -> dict[str, Any]:
        # llama-cpp-python sends the call's id and whole name again with each piece of its arguments.
        part = {"index": 0, "id": "call__0_get_weather_cmpl-1", "type": "function"}
        return {"tool_calls": [{**part, "function": {"name": "get_weather", "arguments": arguments}}]}

    http.post(f"{LOCAL}/chat/completions").mock(
        return_value=sse(
            [
                chunk({"role": "assistant"}),
                chunk(fragment('{"city": ')),
                chunk(fragment('"Paris"}')),
                chunk({}, "stop"),
            ],
            done="[DONE]",
        )
    )
    model = OpenAICompatible("m", base_url=LOCAL)
    from tarry.messages import ModelRequest

    events = [event async for event in model.stream(ModelRequest(messages=(Message("user", "Weather?"),)))]

    call = ToolCall("call__0_get_weather_cmpl-1", "get_weather", {"city": "Paris"})
    assert events == [ToolCallEvent(call), MessageDone(Message("assistant", "", tool_calls=(call,)))]


async def test_a_base_url_without_v1_says_where_completions_usually_are(http: respx.MockRouter) -> None:
    http.post("http://127.0.0.1:8000/chat/completions").mock(
        return_value=httpx.Response(404, json={"detail": "Not Found"})  # what a FastAPI-based server answers
    )
    chat = Chat(model=OpenAICompatible("gemma-3-270m", base_url="http://127.0.0.1:8000", provider="llama"))
    with pytest.raises(ProviderError, match=r"under /v1, so base_url ends with /v1") as raised:
        await chat.ask("Hi")
    assert raised.value.status == 404
    assert "no chat completions at http://127.0.0.1:8000/chat/completions" in str(raised.value)
