"""A model request's span follows the OpenTelemetry GenAI semantic conventions, token usage included."""

from __future__ import annotations

import respx
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from tarry.models import OpenAI
from tarry.tracing import model_attributes
from tests.spans import named, spans_fixture  # noqa: F401 (the spans fixture)

from .test_openai import URL, weather_chat, weather_turns


async def test_each_request_to_openai_is_a_client_span_with_its_token_usage(
    http: respx.MockRouter, spans: InMemorySpanExporter
) -> None:
    http.post(URL).mock(side_effect=weather_turns())
    chat = weather_chat(OpenAI("gpt-4.1-mini", api_key="sk-test"))
    await chat.ask("Weather in Paris and Rome?")

    requests = named(spans, "chat gpt-4.1-mini")
    assert [span.kind for span in requests] == [SpanKind.CLIENT, SpanKind.CLIENT]
    usage = [
        (span.attributes["gen_ai.usage.input_tokens"], span.attributes["gen_ai.usage.output_tokens"])  # type: ignore[index]
        for span in requests
    ]
    assert usage == [(40, 12), (80, 9)]
    assert {key: value for key, value in (requests[0].attributes or {}).items() if "usage" not in key} == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-4.1-mini",
        "gen_ai.conversation.id": chat.id,
        "gen_ai.request.temperature": 0.2,
        "gen_ai.request.max_tokens": 200,
    }
    tools = named(spans, "execute_tool get_weather")
    assert len(tools) == 2
    assert all(span.start_time >= requests[0].end_time for span in tools)  # type: ignore[operator]
    assert all("sk-test" not in str(span.attributes) for span in spans.get_finished_spans())


def test_gemini_is_named_as_the_conventions_spell_it() -> None:
    assert model_attributes("gemini:gemini-2.5-flash", "c1", {})["gen_ai.provider.name"] == "gcp.gemini"
    assert model_attributes("anthropic:claude-sonnet-4-5", "c1", {})["gen_ai.request.model"] == "claude-sonnet-4-5"
