"""OpenTelemetry spans for what tarry does: model requests, tool calls, pauses, decisions, store transactions.

tarry uses only the OpenTelemetry API (``pip install 'tarry[otel]'``), under the tracer named
``tarry``: spans go to whatever tracer provider the application set up, and nowhere while it set
none. Without OpenTelemetry installed, every span here costs a ``nullcontext``. Attributes carry
ids, names, counts and token usage, never arguments, results, answers or notes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from tarry.version import __version__

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer

TRACER = "tarry"
Attributes = Mapping[str, str | int | float | bool | None]
_UNSET: Any = object()
_tracer: Tracer | None = _UNSET


class SpanHandle:
    """A started span's attributes can still be set through this (a no-op without OpenTelemetry)."""

    def __init__(self, span: Span | None) -> None:
        self._span = span

    def set(self, attributes: Attributes) -> None:
        """Set the attributes that are not ``None``."""
        if self._span is not None:
            self._span.set_attributes({key: value for key, value in attributes.items() if value is not None})


def tracer() -> Tracer | None:
    """tarry's tracer, or ``None`` when OpenTelemetry is not installed (looked up once)."""
    global _tracer
    if _tracer is _UNSET:
        try:
            from opentelemetry import trace
        except ImportError:
            _tracer = None
        else:
            _tracer = trace.get_tracer(TRACER, __version__)
    return _tracer


def _provider_set() -> bool:
    """Whether the application set a tracer provider; until it does, a span costs no OpenTelemetry call."""
    from opentelemetry import trace

    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


_NO_SPAN = contextlib.nullcontext(SpanHandle(None))
"""What a span is while nothing records spans: a block's span costs no generator then."""


def span(
    name: str, attributes: Attributes, *, client: bool = False, current: bool = True
) -> contextlib.AbstractContextManager[SpanHandle]:
    """A span around the block; an exception in it is recorded and marks the span as failed.

    ``client`` marks a request to another service (a model, a database). ``current=False``
    keeps the span from becoming the current one, for blocks that yield to their caller
    (an async generator), so no context leaks across the yield.
    """
    found = tracer()
    if found is None or not _provider_set():
        return _NO_SPAN
    return _recorded(found, name, attributes, client=client, current=current)


@contextlib.contextmanager
def _recorded(found: Tracer, name: str, attributes: Attributes, *, client: bool, current: bool) -> Iterator[SpanHandle]:
    from opentelemetry import trace

    kind = trace.SpanKind.CLIENT if client else trace.SpanKind.INTERNAL
    started = found.start_span(name, kind=kind, attributes={k: v for k, v in attributes.items() if v is not None})
    if not started.is_recording():  # no tracer provider set up, or sampled out: skip the context work
        try:
            yield SpanHandle(None)
        finally:
            started.end()
        return
    if current:
        with trace.use_span(started, end_on_exit=True, record_exception=True, set_status_on_exception=True):
            yield SpanHandle(started)
        return
    try:
        yield SpanHandle(started)
    except GeneratorExit:  # the caller stopped reading a stream: not a failure
        raise
    except BaseException as error:
        started.record_exception(error)
        started.set_status(trace.Status(trace.StatusCode.ERROR, type(error).__name__))
        raise
    finally:
        started.end()


def mark(name: str, attributes: Attributes) -> None:
    """A span for a moment rather than a stretch of work: a call paused, a decision recorded."""
    if tracer() is not None and _provider_set():
        with span(name, attributes):
            pass


def span_ids(ids: Mapping[str, str]) -> dict[str, str]:
    """A log record's ids (``chat_id``, ``call_id``, ...) as span attributes."""
    return {f"tarry.{key}": value for key, value in ids.items()}


def decision_attributes(question: Any) -> dict[str, str | None]:
    """The ids and the decision of a decided [`Question`][tarry.Question], as span attributes."""
    call = question.tool_call
    return {
        "tarry.chat_id": question.chat_id,
        "tarry.call_id": call.id if call is not None else None,
        "tarry.question_id": question.id,
        "tarry.decision": question.decision,
        "gen_ai.tool.name": call.name if call is not None else None,
    }


def function_name(function: Any) -> str:
    """The qualified name of a function, or of the function a ``functools.partial`` wraps (never its arguments)."""
    target = getattr(function, "func", function)
    return str(getattr(target, "__qualname__", type(target).__name__))


def model_attributes(model_name: str, chat_id: str, settings: Mapping[str, Any]) -> dict[str, Any]:
    """The GenAI semantic conventions' request attributes for a chat request to ``provider:model``."""
    provider, _, model = model_name.partition(":")
    numbers = {key: value for key, value in settings.items() if isinstance(value, int | float)}
    return {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": _PROVIDERS.get(provider, provider),
        "gen_ai.request.model": model or provider,
        "gen_ai.conversation.id": chat_id,
        "gen_ai.request.temperature": numbers.get("temperature"),
        "gen_ai.request.top_p": numbers.get("top_p"),
        "gen_ai.request.max_tokens": numbers.get("max_tokens", numbers.get("max_output_tokens")),
    }


# tarry's provider names that the GenAI conventions spell another way.
_PROVIDERS = {"gemini": "gcp.gemini"}
