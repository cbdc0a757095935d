"""Google's Gemini API (generateContent and streamGenerateContent)."""

from __future__ import annotations

import base64
import importlib
import re
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any

from tarry.errors import AuthenticationError, ProviderError
from tarry.messages import Message, MessageDone, ModelRequest, StreamEvent, TextDelta, ToolCall, ToolCallEvent, Usage
from tarry.models._errors import provider_error
from tarry.models._hosted import HostedModel
from tarry.models._sdk import require
from tarry.models._transcript import UNPARSED, is_error_result, new_call_id, turns

if TYPE_CHECKING:
    from google import genai

SKIP_SIGNATURE = b"skip_thought_signature_validator"
"""The thought signature Google documents for replaying calls whose own signature was not kept.

A call's own signature is kept in ``call.provider_data["gemini"]["thought_signature"]`` (base64 text)
and sent back with its part instead.
"""
_RENAMED = {"max_tokens": "max_output_tokens", "stop": "stop_sequences"}
_RESERVED = {"system_instruction", "tools", "tool_config"}
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)s$")


class Gemini(HostedModel["genai.Client"]):
    """A Gemini model behind Google's Gemini API.

    >>> Gemini("gemini-2.5-flash", api_key="...").name
    'gemini:gemini-2.5-flash'

    ``api_key`` defaults to ``GEMINI_API_KEY`` (or ``GOOGLE_API_KEY``). Rate limits and
    server errors are retried ``max_retries`` times with backoff by the SDK. ``client``
    takes a ready ``google.genai.Client`` instead.
    """

    provider = "gemini"

    def __init__(
        self,
        model: str,
        api_key: str | None = None,
        base_url: str | None = None,
        *,
        max_retries: int = 2,
        timeout: float | None = None,
        client: genai.Client | None = None,
    ) -> None:
        super().__init__(model, client)
        self._genai = require("google.genai", "gemini")
        self._api_key = api_key
        self._http_options: dict[str, Any] = {"retry_options": {"attempts": max_retries + 1}}
        transport = _httpx_transport()
        if transport is not None:
            # A transport of its own keeps the SDK's async requests on httpx: with aiohttp installed (the notify
            # extra brings it) the SDK would send them through aiohttp, and a chat's traffic would change with it.
            self._http_options["async_client_args"] = {"transport": transport}
        if base_url is not None:
            self._http_options["base_url"] = base_url
        if timeout is not None:
            self._http_options["timeout"] = int(timeout * 1000)

    def _make_client(self) -> genai.Client:
        try:
            client: genai.Client = self._genai.Client(api_key=self._api_key, http_options=self._http_options)
        except ValueError as error:
            raise AuthenticationError(f"{self.provider}: {error}", provider=self.provider) from error
        return client

    async def complete(self, request: ModelRequest) -> Message:
        """Send one generateContent request and return the assistant's reply."""
        arguments = self.request_arguments(request)
        try:
            response = await self.client.aio.models.generate_content(**arguments)
        except self._genai.errors.APIError as error:
            raise self._error(error) from error
        text, calls, signature = _reply_parts(response)
        if not response.candidates:
            raise _blocked(response)
        return Message(
            "assistant",
            "".join(text),
            tool_calls=tuple(calls),
            usage=_usage(response.usage_metadata),
            provider_data=_signature_data(signature),
        )

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Stream one request: text deltas and tool calls as they arrive, then the whole message."""
        arguments = self.request_arguments(request)
        text: list[str] = []
        calls: list[ToolCall] = []
        usage = None
        signature: bytes | None = None
        answered = False
        try:
            chunks = await self.client.aio.models.generate_content_stream(**arguments)
            async for chunk in chunks:
                answered = answered or bool(chunk.candidates)
                if chunk.usage_metadata is not None:
                    usage = _usage(chunk.usage_metadata)
                pieces, new_calls, chunk_signature = _reply_parts(chunk)
                signature = chunk_signature or signature
                for piece in pieces:
                    text.append(piece)
                    yield TextDelta(piece)
                for call in new_calls:
                    calls.append(call)
                    yield ToolCallEvent(call)
                if not chunk.candidates and chunk.prompt_feedback is not None:
                    raise _blocked(chunk)
        except self._genai.errors.APIError as error:
            raise self._error(error) from error
        if not answered:
            raise ProviderError(f"{self.provider}: the stream ended without a reply", provider=self.provider)
        reply = Message(
            "assistant", "".join(text), tool_calls=tuple(calls), usage=usage, provider_data=_signature_data(signature)
        )
        yield MessageDone(reply)

    def request_arguments(self, request: ModelRequest) -> dict[str, Any]:
        """The keyword arguments of ``models.generate_content`` for ``request``."""
        config: dict[str, Any] = {}
        if request.instructions:
            config["system_instruction"] = request.instructions
        if request.tools:
            config["tools"] = [
                {
                    "function_declarations": [
                        {
                            "name": schema.name,
                            "description": schema.description,
                            "parameters_json_schema": dict(schema.parameters),
                        }
                        for schema in request.tools
                    ]
                }
            ]
            if request.tool_choice is not None:
                config["tool_config"] = {"function_calling_config": _tool_choice(request.tool_choice)}
        config.update(self._settings(request.settings))
        return {"model": self.model, "contents": _contents(request), "config": config}

    def _settings(self, settings: Mapping[str, Any]) -> dict[str, Any]:
        mapped = {_RENAMED.get(key, key): value for key, value in settings.items()}
        if isinstance(mapped.get("stop_sequences"), str):
            mapped["stop_sequences"] = [mapped["stop_sequences"]]
        fields = self._genai.types.GenerateContentConfig.model_fields
        unknown = sorted(key for key in mapped if key not in fields or key in _RESERVED)
        if unknown:
            raise ValueError(f"Gemini takes no setting named {', '.join(map(repr, unknown))}")
        return mapped

    def _error(self, error: Any) -> ProviderError:
        body = error.details if isinstance(error.details, Mapping) else {}
        inner = body.get("error", body)
        details = inner.get("details", []) if isinstance(inner, Mapping) else []
        reasons = tuple(item.get("reason") for item in details if isinstance(item, Mapping))
        headers = error.response.headers if getattr(error, "response", None) is not None else {}
        message = str(error.message or "")
        codes = (error.status, *reasons)
        if "API key not valid" in message:
            codes = (*codes, "API_KEY_INVALID")
        return provider_error(
            self.provider,
            message,
            status=error.code,
            codes=codes,
            headers=headers,
            retry_after=_retry_delay(details),
        )

    def __repr__(self) -> str:
        return f"<Gemini {self.name}>"


def _contents(request: ModelRequest) -> list[dict[str, Any]]:
    contents: list[dict[str, Any]] = []
    for message, results in turns(request.messages):
        if message.role == "user":
            contents.append({"role": "user", "parts": [{"text": message.content}]})
            continue
        parts: list[dict[str, Any]] = []
        if message.content:
            parts.append({"text": message.content})
            text_signature = _kept_signature(message.provider_data)
            if text_signature is not None:
                parts[0]["thought_signature"] = text_signature
        for number, call in enumerate(message.tool_calls):
            part: dict[str, Any] = {"function_call": {"name": call.name, "args": _args(call.arguments)}}
            signature = _kept_signature(call.provider_data)
            if signature is not None:
                part["thought_signature"] = signature
            elif number == 0:
                part["thought_signature"] = SKIP_SIGNATURE
            parts.append(part)
        if parts:
            contents.append({"role": "model", "parts": parts})
        names = {call.id: call.name for call in message.tool_calls}
        if results:
            contents.append(
                {
                    "role": "user",
                    "parts": [
                        {"function_response": {"name": names[str(result.tool_call_id)], "response": _response(result)}}
                        for result in results
                    ],
                }
            )
    return contents


def _kept_signature(provider_data: Mapping[str, Any] | None) -> bytes | None:
    """The thought signature Gemini sent with a call or a reply's text (kept as base64 text), if it was kept."""
    kept = (provider_data or {}).get("gemini")
    signature = kept.get("thought_signature") if isinstance(kept, Mapping) else None
    if not isinstance(signature, str) or not signature:
        return None
    try:
        return base64.b64decode(signature, validate=True)
    except ValueError:
        return None


def _args(arguments: Mapping[str, Any]) -> dict[str, Any]:
    return {} if set(arguments) == {UNPARSED} else dict(arguments)


def _response(result: Message) -> dict[str, Any]:
    """Gemini wants an object: tarry's error results as they are, anything else under ``"output"``."""
    if is_error_result(result):
        value: dict[str, Any] = result.result()
        return value
    return {"output": result.result()}


def _tool_choice(choice: str) -> dict[str, Any]:
    if choice in ("auto", "none"):
        return {"mode": choice.upper()}
    if choice == "required":
        return {"mode": "ANY"}
    return {"mode": "ANY", "allowed_function_names": [choice]}


def _reply_parts(response: Any) -> tuple[list[str], list[ToolCall], bytes | None]:
    """A reply's text pieces, its calls, and the thought signature of its text (on any non-thought part)."""
    text: list[str] = []
    calls: list[ToolCall] = []
    text_signature = None
    candidates = response.candidates or []
    content = candidates[0].content if candidates else None
    for part in (content.parts or []) if content is not None else []:
        if part.function_call is not None:
            call = part.function_call
            kept = _signature_data(part.thought_signature)
            calls.append(ToolCall(call.id or new_call_id(), call.name or "", dict(call.args or {}), provider_data=kept))
        elif not part.thought:
            if part.text:
                text.append(part.text)
            text_signature = part.thought_signature or text_signature
    return text, calls, text_signature


def _signature_data(signature: bytes | None) -> dict[str, Any] | None:
    """``provider_data`` that keeps a thought signature as base64 text."""
    if not signature:
        return None
    return {"gemini": {"thought_signature": base64.b64encode(signature).decode("ascii")}}


def _usage(metadata: Any) -> Usage | None:
    if metadata is None:
        return None
    output = (metadata.candidates_token_count or 0) + (metadata.thoughts_token_count or 0)
    return Usage(input_tokens=metadata.prompt_token_count or 0, output_tokens=output)


def _blocked(response: Any) -> ProviderError:
    feedback = response.prompt_feedback
    reason = getattr(feedback, "block_reason", None) if feedback is not None else None
    what = f"blocked the prompt ({getattr(reason, 'value', reason)})" if reason else "sent no candidates"
    return ProviderError(f"gemini: the model {what}", provider="gemini")


def _retry_delay(details: list[Any]) -> float | None:
    for item in details:
        if isinstance(item, Mapping) and str(item.get("@type", "")).endswith("google.rpc.RetryInfo"):
            matched = _DURATION.match(str(item.get("retryDelay", "")))
            if matched:
                return float(matched.group(1))
    return None


def _httpx_transport() -> Any:
    """An async transport of the httpx the SDK sends with (``httpx2``, its fork, in recent releases; ``httpx``
    before), or ``None`` when neither is installed."""
    for name in ("httpx2", "httpx"):
        try:
            return importlib.import_module(name).AsyncHTTPTransport()
        except ImportError:
            continue
    return None
