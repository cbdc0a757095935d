"""An OpenTelemetry SDK tracer provider whose spans the tracing tests read back from memory.

Import ``spans_fixture`` into a test module to use the ``spans`` fixture. Spans are kept only while a test that
uses it runs, so the rest of the suite does not pile them up.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


class _Gate(SimpleSpanProcessor):
    """Passes ended spans on only while ``recording`` is set."""

    recording = False

    def on_end(self, span: ReadableSpan) -> None:
        if self.recording:
            super().on_end(span)


@functools.cache
def _installed() -> tuple[_Gate, InMemorySpanExporter]:
    """The in-memory exporter behind a gate on the global tracer provider (set up once per process)."""
    memory = InMemorySpanExporter()
    gate = _Gate(memory)
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    provider.add_span_processor(gate)
    return gate, memory


@pytest.fixture(name="spans")
def spans_fixture() -> Iterator[InMemorySpanExporter]:
    """The spans this test makes, in the order they end."""
    gate, memory = _installed()
    memory.clear()
    gate.recording = True
    try:
        yield memory
    finally:
        gate.recording = False
        memory.clear()


def named(memory: InMemorySpanExporter, prefix: str) -> list[ReadableSpan]:
    """The finished spans whose name starts with ``prefix``, in the order they ended."""
    return [span for span in memory.get_finished_spans() if span.name.startswith(prefix)]
