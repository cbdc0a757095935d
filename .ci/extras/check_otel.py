"""`tarry[otel]` alone: with the OpenTelemetry API only, tarry's spans reach the provider the application sets.

The application would set the SDK's provider; the API alone has none that records, so this one
keeps the names of the spans started and hands out the API's non-recording spans.
"""

from __future__ import annotations

from typing import Any

from common import FINAL, from_the_wheel, model, passed, refunds
from opentelemetry import trace

from tarry import Chat

started: list[str] = []


class NamesTracer(trace.NoOpTracer):
    """Keeps each span's name."""

    def start_span(self, name: str, *args: Any, **kwargs: Any) -> trace.Span:
        started.append(name)
        return super().start_span(name, *args, **kwargs)


class NamesProvider(trace.NoOpTracerProvider):
    """Gives out :class:`NamesTracer`."""

    def get_tracer(self, *args: Any, **kwargs: Any) -> trace.Tracer:
        return NamesTracer()


if __name__ == "__main__":
    from_the_wheel()
    trace.set_tracer_provider(NamesProvider())
    chat = Chat(model=model(), tools=refunds.tools)
    chat.ask_sync("Order A17 arrived broken.")
    (approval,) = chat.pending_questions_sync()
    chat.approve_sync(approval)
    chat.complete_sync()
    assert chat.messages[-1].content == FINAL, chat.messages
    assert "pause refund" in started and "execute_tool refund" in started, started
    passed("otel", f"a chat's {len(started)} spans reached the application's tracer provider")
