"""The Gemini adapter against the Gemini API's generateContent wire format, driven through a Chat."""

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
from tarry.models import Gemini
from tarry.models.gemini import SKIP_SIGNATURE

from .conftest import TRANSFER_SCHEMA, WEATHER_SCHEMA, TransferMoney, get_weather, sent, sse

BASE = "https://generativelanguage.googleapis.com/v1/models/gemini-2.5-flash"
URL = f"{BASE}:generateContent"
STREAM_URL = f"{BASE}:streamGenerateContent?alt=sse"
SIGNATURE = "c2tpcF90aG91Z2h0X3NpZ25hdHVyZV92YWxpZGF0b3I="
"""``SKIP_SIGNATURE`` in base64, as the JSON body carries bytes."""


def response(*parts: dict[str, Any], usage: tuple[int, int] = (10, 5), thoughts: int = 0) -> dict[str, Any]:
    """A GenerateContentResponse as the Gemini API documents it."""
    metadata = {
        "promptTokenCount": usage[0],
        "candidatesTokenCount": usage[1],
        "totalTokenCount": sum(usage) + thoughts,
    }
    if thoughts:
        metadata["thoughtsTokenCount"] = thoughts
    return {
        "candidates": [{"content": {"role": "model", "parts": list(parts)}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": metadata,
        "modelVersion": "gemini-2.5-flash",
        "responseId": "resp-1",
    }


def function_call(name: str, args: dict[str, Any], id: str | None = None) -> dict[str, Any]:
    call: dict[str, Any] = {"name": name, "args": args}
    if id:
        call["id"] = id
    return {"functionCall": call}


def weather_chat(model: Gemini) -> Chat:
    return Chat(
        model=model,
        tools=[get_weather],
        instructions="Answer in one sentence.",
        settings={"temperature": 0.2, "max_tokens": 200, "stop": "END", "seed": 7, "top_k": 5, "top_p": 0.9},
    )


def weather_turns() -> list[httpx.Response]:
    return [
        httpx.Response(
            200,
            json=response(
                {"text": "Let me look."},
                function_call("get_weather", {"city": "Paris"}, id="fc-1"),
                function_call("get_weather", {"city": "Rome"}, id="fc-2"),
                usage=(40, 8),
                thoughts=4,
            ),
        ),
        httpx.Response(200, json=response({"text": "Paris is sunny, Rome is cloudy."}, usage=(80, 9))),
    ]


EXPECTED_TRANSCRIPT = [
    Message("user", "Weather in Paris and Rome?"),
    Message(
        "assistant",
        "Let me look.",
        tool_calls=(
            ToolCall("fc-1", "get_weather", {"city": "Paris"}),
            ToolCall("fc-2", "get_weather", {"city": "Rome"}),
        ),
        usage=Usage(40, 12),
    ),
    Message("tool", "sunny, 21°C", tool_call_id="fc-1"),
    Message("tool", "cloudy, 18°C", tool_call_id="fc-2"),
    Message("assistant", "Paris is sunny, Rome is cloudy.", usage=Usage(80, 9)),
]


async def test_a_chat_sends_declarations_instructions_and_settings(http: respx.MockRouter) -> None:
    route = http.post(URL).mock(side_effect=weather_turns())
    chat = weather_chat(Gemini("gemini-2.5-flash", api_key="gm-test"))

    answer = await chat.ask("Weather in Paris and Rome?")

    assert answer == EXPECTED_TRANSCRIPT[-1]
    assert chat.messages == EXPECTED_TRANSCRIPT
    assert route.calls[0].request.headers["x-goog-api-key"] == "gm-test"
    # The SDK renders FunctionDeclaration's own fields in proto field-name form (parameters_json_schema),
    # which Google's JSON parsing accepts alongside parametersJsonSchema.
    assert sent(route, 0) == {
        "contents": [{"role": "user", "parts": [{"text": "Weather in Paris and Rome?"}]}],
        "systemInstruction": {"role": "user", "parts": [{"text": "Answer in one sentence."}]},
        "tools": [
            {
                "functionDeclarations": [
                    {
                        "name": "get_weather",
                        "description": "Tells the weather in a city.",
                        "parameters_json_schema": WEATHER_SCHEMA,
                    }
                ]
            }
        ],
        "generationConfig": {
            "temperature": 0.2,
            "maxOutputTokens": 200,
            "stopSequences": ["END"],
            "seed": 7,
            "topK": 5,
            "topP": 0.9,
        },
    }
    assert sent(route, 1)["contents"][1:] == [
        {
            "role": "model",
            "parts": [
                {"text": "Let me look."},
                {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}, "thoughtSignature": SIGNATURE},
                {"functionCall": {"name": "get_weather", "args": {"city": "Rome"}}},
            ],
        },
        {
            "role": "user",
            "parts": [
                {"functionResponse": {"name": "get_weather", "response": {"output": "sunny, 21°C"}}},
                {"functionResponse": {"name": "get_weather", "response": {"output": "cloudy, 18°C"}}},
            ],
        },
    ]


def test_the_replay_signature_is_the_documented_sentinel() -> None:
    assert SKIP_SIGNATURE == b"skip_thought_signature_validator"


async def test_calls_without_ids_get_unique_ids_and_results_find_their_function_names(http: respx.MockRouter) -> None:
    route = http.post(URL).mock(
        side_effect=[
            httpx.Response(
                200,
                json=response(
                    function_call("get_weather", {"city": "Paris"}),
                    function_call("transfer_money", {"amount": 5, "to": "Bob"}),
                ),
            ),
            httpx.Response(200, json=response({"text": "Done."})),
        ]
    )
    chat = Chat(model=Gemini("gemini-2.5-flash", api_key="gm-test"), tools=[get_weather, TransferMoney()])

    await chat.ask("Weather in Paris, and pay Bob 5")
    (approval,) = await chat.pending_questions()
    await chat.approve(approval)
    await chat.complete()

    weather, transfer = chat.messages[1].tool_calls
    assert weather.id.startswith("call_")
    assert transfer.id.startswith("call_")
    assert weather.id != transfer.id
    assert sent(route, 0)["tools"][0]["functionDeclarations"][1]["parameters_json_schema"] == TRANSFER_SCHEMA
    assert sent(route, 1)["contents"][2] == {
        "role": "user",
        "parts": [
            {"functionResponse": {"name": "get_weather", "response": {"output": "sunny, 21°C"}}},
            {"functionResponse": {"name": "transfer_money", "response": {"output": "Sent 5 to Bob"}}},
        ],
    }
    assert chat.messages[-1].content == "Done."


async def test_a_declined_call_reaches_gemini_as_an_error_response(http: respx.MockRouter) -> None:
    route = http.post(URL).mock(
        side_effect=[
            httpx.Response(
                200, json=response(function_call("transfer_money", {"amount": 500, "to": "Eve"}, id="fc-9"))
            ),
            httpx.Response(200, json=response({"text": "Not sent."})),
        ]
    )
    chat = Chat(model=Gemini("gemini-2.5-flash", api_key="gm-test"), tools=[TransferMoney()])

    await chat.ask("Pay Eve 500")
    (approval,) = await chat.pending_questions()
    await chat.decline(approval, "Too much")
    await chat.complete()

    assert sent(route, 1)["contents"][2]["parts"] == [
        {
            "functionResponse": {
                "name": "transfer_money",
                "response": {"error": "The user declined the transfer_money call.", "note": "Too much"},
            }
        }
    ]


@pytest.mark.parametrize(
    ("choice", "wire"),
    [
        ("required", {"mode": "ANY"}),
        ("get_weather", {"mode": "ANY", "allowedFunctionNames": ["get_weather"]}),
    ],
)
async def test_a_forcing_tool_choice_is_sent_then_relaxed(http: respx.MockRouter, choice: str, wire: Any) -> None:
    route = http.post(URL).mock(
        side_effect=[
            httpx.Response(200, json=response(function_call("get_weather", {"city": "Paris"}, id="fc-1"))),
            httpx.Response(200, json=response({"text": "Sunny."})),
        ]
    )
    chat = Chat(model=Gemini("gemini-2.5-flash", api_key="gm-test"), tools=[get_weather], tool_choice=choice)

    await chat.ask("Weather in Paris?")

    assert sent(route, 0)["toolConfig"] == {"functionCallingConfig": wire}
    assert sent(route, 1)["toolConfig"] == {"functionCallingConfig": {"mode": "AUTO"}}


@pytest.mark.parametrize("choice", ["auto", "none"])
async def test_auto_and_none(http: respx.MockRouter, choice: str) -> None:
    route = http.post(URL).mock(return_value=httpx.Response(200, json=response({"text": "Hello."})))
    chat = Chat(model=Gemini("gemini-2.5-flash", api_key="gm-test"), tools=[get_weather], tool_choice=choice)

    await chat.ask("Hi")

    assert sent(route)["toolConfig"] == {"functionCallingConfig": {"mode": choice.upper()}}


def streamed_weather_turns() -> list[httpx.Response]:
    def chunk(*parts: dict[str, Any], usage: dict[str, int] | None = None) -> dict[str, Any]:
        item: dict[str, Any] = {"candidates": [{"content": {"role": "model", "parts": list(parts)}, "index": 0}]}
        if usage:
            item["usageMetadata"] = usage
        return item

    first = [
        chunk({"text": "Let me "}),
        chunk({"text": "look."}),
        chunk(
            function_call("get_weather", {"city": "Paris"}, id="fc-1"),
            function_call("get_weather", {"city": "Rome"}, id="fc-2"),
            usage={"promptTokenCount": 40, "candidatesTokenCount": 8, "thoughtsTokenCount": 4, "totalTokenCount": 52},
        ),
    ]
    second = [
        chunk({"text": "Paris is sunny, "}),
        chunk(
            {"text": "Rome is cloudy."},
            usage={"promptTokenCount": 80, "candidatesTokenCount": 9, "totalTokenCount": 89},
        ),
    ]
    return [sse(first), sse(second)]


async def test_streaming_yields_deltas_and_calls_and_records_the_plain_transcript(http: respx.MockRouter) -> None:
    plain_route = http.post(URL).mock(side_effect=weather_turns())
    stream_route = http.post(STREAM_URL).mock(side_effect=streamed_weather_turns())
    plain = weather_chat(Gemini("gemini-2.5-flash", api_key="gm-test"))
    await plain.ask("Weather in Paris and Rome?")
    streamed = weather_chat(Gemini("gemini-2.5-flash", api_key="gm-test"))

    events = [event async for event in streamed.stream("Weather in Paris and Rome?")]

    assert streamed.messages == plain.messages == EXPECTED_TRANSCRIPT
    assert [event for event in events if not isinstance(event, MessageDone)] == [
        TextDelta("Let me "),
        TextDelta("look."),
        ToolCallEvent(ToolCall("fc-1", "get_weather", {"city": "Paris"})),
        ToolCallEvent(ToolCall("fc-2", "get_weather", {"city": "Rome"})),
        TextDelta("Paris is sunny, "),
        TextDelta("Rome is cloudy."),
    ]
    assert [sent(stream_route, n) for n in (0, 1)] == [sent(plain_route, n) for n in (0, 1)]


def error(code: int, status: str, message: str, *details: dict[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = {"code": code, "message": message, "status": status}
    if details:
        body["details"] = list(details)
    return {"error": body}


@pytest.mark.parametrize(
    ("response_", "error_type", "status"),
    [
        (
            httpx.Response(
                400,
                json=error(
                    400,
                    "INVALID_ARGUMENT",
                    "API key not valid. Please pass a valid API key.",
                    {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID"},
                ),
            ),
            AuthenticationError,
            400,
        ),
        (
            httpx.Response(403, json=error(403, "PERMISSION_DENIED", "Method doesn't allow unregistered callers.")),
            AuthenticationError,
            403,
        ),
        (
            httpx.Response(
                400,
                json=error(
                    400,
                    "INVALID_ARGUMENT",
                    "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).",
                ),
            ),
            ContextLengthError,
            400,
        ),
        (httpx.Response(500, json=error(500, "INTERNAL", "An internal error has occurred.")), ProviderError, 500),
    ],
)
async def test_errors_become_tarry_errors_and_leave_the_transcript(
    http: respx.MockRouter, response_: httpx.Response, error_type: type[ProviderError], status: int
) -> None:
    http.post(URL).mock(return_value=response_)
    chat = Chat(model=Gemini("gemini-2.5-flash", api_key="gm-test", max_retries=0))

    with pytest.raises(error_type) as raised:
        await chat.ask("Hi")

    assert type(raised.value) is error_type
    assert raised.value.status == status
    assert raised.value.provider == "gemini"
    assert json.loads(response_.content)["error"]["message"] in str(raised.value)
    assert chat.messages == [Message("user", "Hi")]


async def test_a_rate_limit_carries_the_retry_delay_gemini_sent(http: respx.MockRouter) -> None:
    http.post(URL).mock(
        side_effect=[
            httpx.Response(
                429,
                json=error(
                    429,
                    "RESOURCE_EXHAUSTED",
                    "You exceeded your current quota, please check your plan and billing details.",
                    {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "37s"},
                ),
            ),
            httpx.Response(200, json=response({"text": "Hello."})),
        ]
    )
    chat = Chat(model=Gemini("gemini-2.5-flash", api_key="gm-test", max_retries=0))

    with pytest.raises(RateLimitError) as raised:
        await chat.ask("Hi")

    assert raised.value.retry_after == 37.0
    assert raised.value.status == 429
    assert "exceeded your current quota" in str(raised.value)
    assert chat.messages == [Message("user", "Hi")]
    assert await chat.complete() == Message("assistant", "Hello.", usage=Usage(10, 5))


async def test_server_errors_are_retried_by_the_sdk(http: respx.MockRouter) -> None:
    route = http.post(URL).mock(
        side_effect=[
            httpx.Response(503, json=error(503, "UNAVAILABLE", "The model is overloaded.")),
            httpx.Response(200, json=response({"text": "Hello."})),
        ]
    )
    chat = Chat(model=Gemini("gemini-2.5-flash", api_key="gm-test", max_retries=1))

    assert await chat.ask("Hi") == Message("assistant", "Hello.", usage=Usage(10, 5))
    assert route.call_count == 2


async def test_a_blocked_prompt_is_a_provider_error(http: respx.MockRouter) -> None:
    http.post(URL).mock(
        return_value=httpx.Response(
            200, json={"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": {"promptTokenCount": 3}}
        )
    )
    chat = Chat(model=Gemini("gemini-2.5-flash", api_key="gm-test"))

    with pytest.raises(ProviderError, match="SAFETY"):
        await chat.ask("Hi")
    assert chat.messages == [Message("user", "Hi")]


async def test_the_model_string_resolves_and_reads_the_key_from_the_environment(
    http: respx.MockRouter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GEMINI_API_KEY", "gm-env")
    route = http.post(URL).mock(return_value=httpx.Response(200, json=response({"text": "Hello."})))

    chat = Chat(model="gemini:gemini-2.5-flash")
    await chat.ask("Hi")

    assert isinstance(chat.model, Gemini)
    assert chat.model.name == "gemini:gemini-2.5-flash"
    assert route.calls[0].request.headers["x-goog-api-key"] == "gm-env"


async def test_a_missing_key_is_an_authentication_error() -> None:
    chat = Chat(model=Gemini("gemini-2.5-flash"))

    with pytest.raises(AuthenticationError):
        await chat.ask("Hi")
    assert chat.messages == [Message("user", "Hi")]


def test_an_unknown_setting_is_refused_by_name() -> None:
    from tarry.messages import ModelRequest

    model = Gemini("gemini-2.5-flash", api_key="gm-test")

    with pytest.raises(ValueError, match="'logit_bias'"):
        model.request_arguments(ModelRequest(messages=[Message("user", "Hi")], settings={"logit_bias": {}}))


def test_a_missing_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "google.genai", None)

    with pytest.raises(ImportError, match=r"pip install 'tarry\[gemini\]'"):
        Gemini("gemini-2.5-flash")
