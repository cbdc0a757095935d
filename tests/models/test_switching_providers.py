"""The transcript is provider-neutral: a chat started on one provider carries on with another."""

from __future__ import annotations

import httpx
import respx

from tarry import Chat
from tarry.models import Anthropic, Gemini, OpenAI

from .conftest import get_weather, sent
from .test_anthropic import URL as ANTHROPIC_URL
from .test_anthropic import reply, text
from .test_gemini import URL as GEMINI_URL
from .test_gemini import response
from .test_openai import URL as OPENAI_URL
from .test_openai import call, completion


async def test_a_chat_started_on_openai_continues_on_anthropic_and_gemini(http: respx.MockRouter) -> None:
    http.post(OPENAI_URL).mock(
        side_effect=[
            httpx.Response(200, json=completion(None, [call("call_1", "get_weather", {"city": "Paris"})])),
            httpx.Response(200, json=completion("Sunny in Paris.")),
        ]
    )
    anthropic_route = http.post(ANTHROPIC_URL).mock(return_value=httpx.Response(200, json=reply(text("Still sunny."))))
    gemini_route = http.post(GEMINI_URL).mock(return_value=httpx.Response(200, json=response({"text": "Yes."})))
    chat = Chat(model=OpenAI("gpt-4.1-mini", api_key="sk-test"), tools=[get_weather])
    await chat.ask("Weather in Paris?")

    chat.model = Anthropic("claude-sonnet-4-6", api_key="sk-ant-test")
    await chat.ask("And now?")
    chat.model = Gemini("gemini-2.5-flash", api_key="gm-test")
    await chat.ask("Sure?")

    assert [message.content for message in chat.messages if message.role == "assistant"] == [
        "",
        "Sunny in Paris.",
        "Still sunny.",
        "Yes.",
    ]
    assert sent(anthropic_route)["messages"] == [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "sunny, 21°C"}],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "Sunny in Paris."}]},
        {"role": "user", "content": "And now?"},
    ]
    contents = sent(gemini_route)["contents"]
    assert [content["role"] for content in contents] == ["user", "model", "user", "model", "user", "model", "user"]
    assert contents[2]["parts"] == [
        {"functionResponse": {"name": "get_weather", "response": {"output": "sunny, 21°C"}}}
    ]
    assert contents[5]["parts"] == [{"text": "Still sunny."}]
