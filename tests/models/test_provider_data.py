"""Provider reasoning state kept between turns: Anthropic's thinking blocks and Gemini's thought signatures.

Each reply carries state its provider wants back on the next request; the adapter keeps it in
``provider_data`` under its own key, sends it back exactly, and it survives a store.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx

from tarry import Chat, Message, ToolCall
from tarry.messages import MessageDone
from tarry.models import Anthropic, Gemini
from tarry.store import Store

from .conftest import TransferMoney, get_weather, sent, sse
from .test_anthropic import URL as ANTHROPIC_URL
from .test_anthropic import block_start, delta, message_delta, message_start, reply, stop, text, tool_use
from .test_gemini import SIGNATURE as SKIP_SIGNATURE_BASE64
from .test_gemini import response

GEMINI_BASE = "https://generativelanguage.googleapis.com/v1/models/gemini-3-pro-preview"
GEMINI_URL = f"{GEMINI_BASE}:generateContent"
GEMINI_STREAM_URL = f"{GEMINI_BASE}:streamGenerateContent?alt=sse"

THINKING = {
    "type": "thinking",
    "thinking": "The user wants the weather in Paris; I should call get_weather.",
    "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds1A0MBQGN8VPmeyu5SyJ2BWJHXMy",
}
REDACTED = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"}
PARIS_SIGNATURE = base64.b64encode(b"\x12\x0a opaque signature of the Paris call").decode("ascii")
ROME_SIGNATURE = base64.b64encode(b"\x12\x0a opaque signature of the Rome call").decode("ascii")


def claude() -> Anthropic:
    return Anthropic("claude-sonnet-4-6", api_key="sk-ant-test")


def gemini3() -> Gemini:
    return Gemini("gemini-3-pro-preview", api_key="gm-test")


def thinking_turns() -> list[httpx.Response]:
    return [
        httpx.Response(
            200,
            json=reply(
                THINKING,
                REDACTED,
                text("Let me look."),
                tool_use("toolu_1", "get_weather", {"city": "Paris"}),
            ),
        ),
        httpx.Response(200, json=reply(text("Paris is sunny."))),
    ]


EXPECTED_ASSISTANT_TURN = {
    "role": "assistant",
    "content": [
        THINKING,
        REDACTED,
        text("Let me look."),
        tool_use("toolu_1", "get_weather", {"city": "Paris"}),
    ],
}
EXPECTED_RESULTS_TURN = {
    "role": "user",
    "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny, 21°C"}],
}


async def test_anthropic_thinking_blocks_are_kept_and_sent_back_first_and_unchanged(http: respx.MockRouter) -> None:
    route = http.post(ANTHROPIC_URL).mock(side_effect=thinking_turns())
    chat = Chat(model=claude(), tools=[get_weather])

    await chat.ask("Weather in Paris?")

    assert chat.messages[1].provider_data == {"anthropic": {"thinking": [THINKING, REDACTED]}}
    assert chat.messages[-1].provider_data is None
    assert sent(route, 1)["messages"] == [
        {"role": "user", "content": "Weather in Paris?"},
        EXPECTED_ASSISTANT_TURN,
        EXPECTED_RESULTS_TURN,
    ]


async def test_anthropic_streamed_thinking_is_kept_like_the_plain_reply(http: respx.MockRouter) -> None:
    first = [
        message_start(),
        block_start(0, {"type": "thinking", "thinking": "", "signature": ""}),
        delta(0, {"type": "thinking_delta", "thinking": THINKING["thinking"][:20]}),
        delta(0, {"type": "thinking_delta", "thinking": THINKING["thinking"][20:]}),
        delta(0, {"type": "signature_delta", "signature": THINKING["signature"]}),
        stop(0),
        block_start(1, REDACTED),
        stop(1),
        block_start(2, {"type": "text", "text": ""}),
        delta(2, {"type": "text_delta", "text": "Let me look."}),
        stop(2),
        block_start(3, {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}),
        delta(3, {"type": "input_json_delta", "partial_json": '{"city": "Paris"}'}),
        stop(3),
        message_delta("tool_use", 30),
        {"type": "message_stop"},
    ]
    second = [
        message_start(),
        block_start(0, {"type": "text", "text": ""}),
        delta(0, {"type": "text_delta", "text": "Paris is sunny."}),
        stop(0),
        message_delta("end_turn", 30),
        {"type": "message_stop"},
    ]
    route = http.post(ANTHROPIC_URL).mock(side_effect=[sse(first, named=True), sse(second, named=True)])
    chat = Chat(model=claude(), tools=[get_weather])

    events = [event async for event in chat.stream("Weather in Paris?")]

    done_messages = [event.message for event in events if isinstance(event, MessageDone)]
    assert done_messages[0].provider_data == {"anthropic": {"thinking": [THINKING, REDACTED]}}
    body = sent(route, 1)
    assert body.pop("stream") is True
    assert body["messages"][1:] == [EXPECTED_ASSISTANT_TURN, EXPECTED_RESULTS_TURN]


async def test_anthropic_thinking_survives_a_store_and_another_process(http: respx.MockRouter, tmp_path: Path) -> None:
    paid = httpx.Response(
        200,
        json=reply(THINKING, REDACTED, tool_use("toolu_1", "transfer_money", {"amount": 5, "to": "Bob"})),
    )
    route = http.post(ANTHROPIC_URL).mock(side_effect=[paid, httpx.Response(200, json=reply(text("Bob is paid.")))])
    url = f"sqlite:///{tmp_path / 'tarry.db'}"
    async with Store(url) as store:
        await store.setup()
        chat = await store.create_chat(claude(), [TransferMoney()])
        await chat.ask("Pay Bob 5")
        assert chat.waiting
        transcript = list(chat.messages)
    async with Store(url) as other:
        (question,) = await other.pending_questions(chat.id)
        assert await other.approve(question.id)
        loaded = await other.load_chat(chat.id, claude(), [TransferMoney()])
        assert loaded.messages == transcript
        answer = await loaded.complete()

    assert answer is not None and answer.content == "Bob is paid."
    assert sent(route, 1)["messages"][1:] == [
        {
            "role": "assistant",
            "content": [THINKING, REDACTED, tool_use("toolu_1", "transfer_money", {"amount": 5, "to": "Bob"})],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sent 5 to Bob"}]},
    ]


def signed_calls() -> dict[str, Any]:
    """Parallel calls as Gemini 3 sends them: a thought signature on each call it signed."""
    return response(
        {"text": "Let me look."},
        {
            "functionCall": {"id": "fc-1", "name": "get_weather", "args": {"city": "Paris"}},
            "thoughtSignature": PARIS_SIGNATURE,
        },
        {
            "functionCall": {"id": "fc-2", "name": "get_weather", "args": {"city": "Rome"}},
            "thoughtSignature": ROME_SIGNATURE,
        },
    )


EXPECTED_MODEL_TURN = {
    "role": "model",
    "parts": [
        {"text": "Let me look."},
        {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}, "thoughtSignature": PARIS_SIGNATURE},
        {"functionCall": {"name": "get_weather", "args": {"city": "Rome"}}, "thoughtSignature": ROME_SIGNATURE},
    ],
}


async def test_gemini_thought_signatures_are_kept_per_call_and_sent_back_with_it(http: respx.MockRouter) -> None:
    route = http.post(GEMINI_URL).mock(
        side_effect=[httpx.Response(200, json=signed_calls()), httpx.Response(200, json=response({"text": "Done."}))]
    )
    chat = Chat(model=gemini3(), tools=[get_weather])

    await chat.ask("Weather in Paris and Rome?")

    assert chat.messages[1].tool_calls == (
        ToolCall(
            "fc-1", "get_weather", {"city": "Paris"}, provider_data={"gemini": {"thought_signature": PARIS_SIGNATURE}}
        ),
        ToolCall(
            "fc-2", "get_weather", {"city": "Rome"}, provider_data={"gemini": {"thought_signature": ROME_SIGNATURE}}
        ),
    )
    assert chat.messages[1].provider_data is None
    assert sent(route, 1)["contents"][1] == EXPECTED_MODEL_TURN


async def test_gemini_streamed_signatures_are_kept_too(http: respx.MockRouter) -> None:
    parts = signed_calls()["candidates"][0]["content"]["parts"]
    chunks = [{"candidates": [{"content": {"role": "model", "parts": [part]}, "index": 0}]} for part in parts]
    route = http.post(GEMINI_STREAM_URL).mock(side_effect=[sse(chunks), sse([response({"text": "Done."})])])
    chat = Chat(model=gemini3(), tools=[get_weather])

    [event async for event in chat.stream("Weather in Paris and Rome?")]

    assert sent(route, 1)["contents"][1] == EXPECTED_MODEL_TURN


async def test_gemini_signatures_survive_a_store_and_another_process(http: respx.MockRouter, tmp_path: Path) -> None:
    route = http.post(GEMINI_URL).mock(
        side_effect=[
            httpx.Response(200, json=signed_calls()),
            httpx.Response(200, json=response({"text": "Paris is sunny, Rome is cloudy."})),
            httpx.Response(200, json=response({"text": "Yes."})),
        ]
    )
    url = f"sqlite:///{tmp_path / 'tarry.db'}"
    async with Store(url) as store:
        await store.setup()
        chat = await store.create_chat(gemini3(), [get_weather])
        await chat.ask("Weather in Paris and Rome?")
        transcript = list(chat.messages)
    async with Store(url) as other:
        loaded = await other.load_chat(chat.id, gemini3(), [get_weather])
        assert loaded.messages == transcript
        await loaded.ask("Sure?")

    assert sent(route, 2)["contents"][1] == EXPECTED_MODEL_TURN


async def test_each_provider_ignores_the_others_state_when_a_chat_switches(http: respx.MockRouter) -> None:
    anthropic_route = http.post(ANTHROPIC_URL).mock(
        side_effect=[*thinking_turns(), httpx.Response(200, json=reply(text("Still.")))]
    )
    gemini_route = http.post(GEMINI_URL).mock(
        side_effect=[httpx.Response(200, json=signed_calls()), httpx.Response(200, json=response({"text": "Done."}))]
    )
    chat = Chat(model=claude(), tools=[get_weather])
    await chat.ask("Weather in Paris?")

    chat.model = gemini3()
    await chat.ask("And Rome?")
    chat.model = claude()
    await chat.ask("Sure?")

    # Gemini never sees Anthropic's thinking; the call it did not sign gets the documented placeholder.
    assert sent(gemini_route, 0)["contents"][1] == {
        "role": "model",
        "parts": [
            {"text": "Let me look."},
            {
                "functionCall": {"name": "get_weather", "args": {"city": "Paris"}},
                "thoughtSignature": SKIP_SIGNATURE_BASE64,
            },
        ],
    }
    # Anthropic gets its own thinking back and nothing of Gemini's signatures.
    messages = sent(anthropic_route, 2)["messages"]
    assert messages[1] == EXPECTED_ASSISTANT_TURN
    assert messages[5] == {
        "role": "assistant",
        "content": [
            text("Let me look."),
            tool_use("fc-1", "get_weather", {"city": "Paris"}),
            tool_use("fc-2", "get_weather", {"city": "Rome"}),
        ],
    }


def test_provider_data_is_part_of_a_message_and_must_be_a_mapping() -> None:
    kept = Message("assistant", "Hi", provider_data={"anthropic": {"thinking": [REDACTED]}})
    assert kept != Message("assistant", "Hi")
    assert kept == Message("assistant", "Hi", provider_data={"anthropic": {"thinking": [REDACTED]}})
    with pytest.raises(TypeError, match="provider_data must be a dict"):
        ToolCall("c", "f", provider_data="signature")  # type: ignore[arg-type]


TEXT_SIGNATURE = base64.b64encode(b"\x12\x0a opaque signature of a text-only reply").decode("ascii")


async def test_gemini_a_signature_on_a_text_only_reply_is_kept_and_sent_back_with_the_text(
    http: respx.MockRouter,
) -> None:
    route = http.post(GEMINI_URL).mock(
        side_effect=[
            httpx.Response(200, json=response({"text": "Paris is sunny.", "thoughtSignature": TEXT_SIGNATURE})),
            httpx.Response(200, json=response({"text": "Yes."})),
        ]
    )
    chat = Chat(model=gemini3())

    await chat.ask("Weather in Paris?")
    await chat.ask("Sure?")

    assert chat.messages[1].provider_data == {"gemini": {"thought_signature": TEXT_SIGNATURE}}
    assert sent(route, 1)["contents"][1] == {
        "role": "model",
        "parts": [{"text": "Paris is sunny.", "thoughtSignature": TEXT_SIGNATURE}],
    }
    assert chat.messages[3].provider_data is None


async def test_gemini_a_streamed_text_signature_in_an_empty_last_part_is_kept(http: respx.MockRouter) -> None:
    chunks = [
        {"candidates": [{"content": {"role": "model", "parts": [{"text": "Paris is "}]}, "index": 0}]},
        {"candidates": [{"content": {"role": "model", "parts": [{"text": "sunny."}]}, "index": 0}]},
        response({"text": "", "thoughtSignature": TEXT_SIGNATURE}),
    ]
    route = http.post(GEMINI_STREAM_URL).mock(side_effect=[sse(chunks), sse([response({"text": "Yes."})])])
    chat = Chat(model=gemini3())

    [event async for event in chat.stream("Weather in Paris?")]
    [event async for event in chat.stream("Sure?")]

    assert chat.messages[1] == Message(
        "assistant",
        "Paris is sunny.",
        usage=chat.messages[1].usage,
        provider_data={"gemini": {"thought_signature": TEXT_SIGNATURE}},
    )
    assert sent(route, 1)["contents"][1]["parts"] == [{"text": "Paris is sunny.", "thoughtSignature": TEXT_SIGNATURE}]


def test_anthropic_two_assistant_messages_in_a_row_are_one_turn_with_all_thinking_first() -> None:
    from tarry.messages import ModelRequest

    second_thinking = {**THINKING, "thinking": "Now Rome.", "signature": "EqQBCgIYAhIMsecond"}
    transcript = (
        Message("user", "Weather in Paris and Rome?"),
        Message("assistant", "Paris first.", provider_data={"anthropic": {"thinking": [THINKING]}}),
        Message(
            "assistant",
            "",
            tool_calls=(ToolCall("toolu_2", "get_weather", {"city": "Rome"}),),
            provider_data={"anthropic": {"thinking": [second_thinking, REDACTED]}},
        ),
        Message("tool", "cloudy, 18°C", tool_call_id="toolu_2"),
    )

    body = claude().request_body(ModelRequest(messages=transcript))

    assert body["messages"][1:] == [
        {
            "role": "assistant",
            "content": [
                THINKING,
                second_thinking,
                REDACTED,
                text("Paris first."),
                tool_use("toolu_2", "get_weather", {"city": "Rome"}),
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_2", "content": "cloudy, 18°C"}]},
    ]
