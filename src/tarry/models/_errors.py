"""Turning a provider's failure into the [`tarry.errors`][tarry.errors] type that says what went wrong."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

from tarry.errors import AuthenticationError, ContextLengthError, ProviderError, RateLimitError

_CONTEXT_CODES = {"context_length_exceeded", "string_above_max_length", "request_too_large"}
_CONTEXT_WORDS = re.compile(
    r"context length|context window|maximum context|prompt is too long|too many tokens|input token count"
    r"|exceeds the maximum number of tokens|context_length_exceeded",
    re.IGNORECASE,
)
_AUTH_CODES = {"authentication_error", "permission_error", "invalid_api_key", "API_KEY_INVALID", "UNAUTHENTICATED"}
_RATE_CODES = {"rate_limit_error", "rate_limit_exceeded", "RESOURCE_EXHAUSTED"}


def provider_error(
    provider: str,
    message: str,
    *,
    status: int | None = None,
    codes: tuple[str | None, ...] = (),
    headers: Mapping[str, str] | None = None,
    retry_after: float | None = None,
) -> ProviderError:
    """The tarry error for a failed request: ``codes`` are the provider's error codes or types, if any."""
    known = {code for code in codes if code}
    text = f"{provider}: {message}" if message else f"{provider} failed (HTTP {status})"
    if status in (401, 403) or known & _AUTH_CODES:
        return AuthenticationError(text, provider=provider, status=status)
    if status == 429 or known & _RATE_CODES:
        wait = retry_after if retry_after is not None else retry_after_header(headers or {})
        return RateLimitError(text, provider=provider, status=status, retry_after=wait)
    if status == 413 or known & _CONTEXT_CODES or (status in (400, None) and _CONTEXT_WORDS.search(message)):
        return ContextLengthError(text, provider=provider, status=status)
    return ProviderError(text, provider=provider, status=status)


def retry_after_header(headers: Mapping[str, str]) -> float | None:
    """The seconds a ``retry-after-ms`` or ``retry-after`` header (seconds or an HTTP date) asks to wait."""
    lowered = {key.lower(): value for key, value in headers.items()}
    milliseconds = lowered.get("retry-after-ms")
    if milliseconds is not None:
        try:
            return max(float(milliseconds) / 1000, 0.0)
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max((when - datetime.now(UTC)).total_seconds(), 0.0)


def body_message(body: Any) -> str | None:
    """The human-readable message of an error body such as ``{"error": {"message": ...}}``."""
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        if isinstance(inner, Mapping) and isinstance(inner.get("message"), str):
            return str(inner["message"])
        if isinstance(body.get("message"), str):
            return str(body["message"])
    if isinstance(body, str) and body.strip():
        return body.strip()
    return None
