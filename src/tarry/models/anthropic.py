"""Anthropic's messages API."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any

from tarry.errors import AuthenticationError, ProviderError
from tarry.messages import Message, MessageDone, ModelRequest, StreamEvent, TextDelta, ToolCall, ToolCallEvent, Usage
from tarry.models._errors import body_message, provider_error
from tarry.models._hosted import HostedModel
from tarry.models._sdk import require
from tarry.models._transcript import UNPARSED, is_error_result, new_call_id, parse_arguments, turns

if TYPE_CHECKING:
    import anthropic

_RESERVED = {"model", "messages", "system", "tools", "tool_choice", "stream"}
_THINKING = ("thinking", "redacted_thinking")
"""Content blocks of extended thinking, kept in ``provider_data["anthropic"]["thinking"]`` and replayed."""
_DROPPED = {"seed", "presence_penalty", "frequency_penalty"}
"""Common sampling settings Anthropic has no parameter for."""


class Anthropic(HostedModel["anthropic.AsyncAnthropic"]):
    """A Claude model behind Anthropic's messages API.

    >>> Anthropic("claude-sonnet-4-6", api_key="sk-ant-...").name
    'anthropic:claude-sonnet-4-6'

    ``api_key`` defaults to ``ANTHROPIC_API_KEY``. Anthropic requires a reply length:
    ``max_tokens`` is used unless the chat's settings name one. Rate limits, overloads and
    server errors are retried ``max_retries`` times with backoff by the SDK. ``client``
    takes a ready ``anthropic.AsyncAnthropic`` instead.
    """

    provider = "anthropic"

    def __init__(
        self,
        model: str,
        api_key: str | None = None,
        base_url: str | None = None,
        *,
        max_tokens: int = 4096,
        max_retries: int = 2,
        timeout: float | None = None,
        default_headers: Mapping[str, str] | None = None,
        client: anthropic.AsyncAnthropic | None = None,
    ) -> None:
        super().__init__(model, client)
        self._sdk = require("anthropic", "anthropic")
        self.max_tokens = max_tokens
        self._options: dict[str, Any] = {
            "api_key": api_key,
            "base_url": base_url,
            "max_retries": max_retries,
            "default_headers": default_headers,
        }
        if timeout is not None:
            self._options["timeout"] = timeout

    def _make_client(self) -> anthropic.AsyncAnthropic:
        keys = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")
        if self._options["api_key"] is None and not any(os.environ.get(key) for key in keys):
            raise AuthenticationError(
                "anthropic: no API key; pass api_key= or set ANTHROPIC_API_KEY", provider=self.provider
            )
        client: anthropic.AsyncAnthropic = self._sdk.AsyncAnthropic(**self._options)
        return client

    async def complete(self, request: ModelRequest) -> Message:
        """Send one messages request and return the assistant's reply."""
        body = self.request_body(request)
        try:
            reply = await self.client.messages.create(**body)
        except self._sdk.AnthropicError as error:
            raise self._error(error) from error
        text = "".join(block.text for block in reply.content if block.type == "text")
        calls = tuple(
            ToolCall(block.id or new_call_id(), block.name, dict(block.input or {}))
            for block in reply.content
            if block.type == "tool_use"
        )
        thinking = [_thinking_block(block) for block in reply.content if block.type in _THINKING]
        usage = _usage(reply.usage, reply.usage.output_tokens)
        return Message("assistant", text, tool_calls=calls, usage=usage, provider_data=_provider_data(thinking))

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Stream one request: text deltas, each tool call once its block ends, then the whole message."""
        body = {**self.request_body(request), "stream": True}
        reply = _StreamedReply()
        try:
            events = await self.client.messages.create(**body)
            async with events:
                async for event in events:
                    taken = reply.take(event)
                    if taken is not None:
                        yield taken
        except self._sdk.AnthropicError as error:
            raise self._error(error) from error
        yield MessageDone(reply.message())

    def request_body(self, request: ModelRequest) -> dict[str, Any]:
        """The keyword arguments of ``messages.create`` for ``request``."""
        settings = dict(request.settings)
        reserved = _RESERVED & set(settings)
        if reserved:
            raise ValueError(f"Chat settings cannot set {', '.join(sorted(reserved))}; the chat sends those")
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": settings.pop("max_tokens", self.max_tokens),
            "messages": _messages(request),
        }
        if request.instructions:
            body["system"] = request.instructions
        if request.tools:
            body["tools"] = [
                {"name": schema.name, "description": schema.description, "input_schema": dict(schema.parameters)}
                for schema in request.tools
            ]
            if request.tool_choice is not None:
                body["tool_choice"] = _tool_choice(request.tool_choice)
        stop = settings.pop("stop", None)
        if stop is not None:
            settings["stop_sequences"] = [stop] if isinstance(stop, str) else list(stop)
        extra = {key: value for key, value in settings.items() if key not in _DROPPED}
        if extra:
            body["extra_body"] = extra
        return body

    def _error(self, error: Exception) -> ProviderError:
        sdk = self._sdk
        if isinstance(error, sdk.APIStatusError):
            return provider_error(
                self.provider,
                getattr(error, "api_message", None) or body_message(error.body) or error.message,
                status=error.status_code,
                codes=(getattr(error, "type", None), getattr(error, "error_code", None)),
                headers=error.response.headers,
            )
        if isinstance(error, sdk.APIError):
            return provider_error(self.provider, body_message(error.body) or error.message)
        return ProviderError(f"{self.provider}: {error}", provider=self.provider)

    def __repr__(self) -> str:
        return f"<Anthropic {self.name}>"


class _StreamedReply:
    """What a streamed reply has said so far: text, thinking, usage, the calls complete and those arriving."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.blocks: dict[int, dict[str, str]] = {}
        self.thinking: dict[int, dict[str, Any]] = {}
        self.calls: list[ToolCall] = []
        self.started: Any = None
        self.output_tokens = 0

    def take(self, event: Any) -> StreamEvent | None:
        """Note one server event; the stream event it completes, if any (a text delta, a whole tool call)."""
        if event.type == "message_start":
            self.started = event.message.usage
            self.output_tokens = self.started.output_tokens or 0
        elif event.type == "content_block_start":
            self._start_block(event.index, event.content_block)
        elif event.type == "content_block_delta":
            return self._take_delta(event.index, event.delta)
        elif event.type == "content_block_stop" and event.index in self.blocks:
            part = self.blocks.pop(event.index)
            self.calls.append(ToolCall(part["id"] or new_call_id(), part["name"], parse_arguments(part["json"])))
            return ToolCallEvent(self.calls[-1])
        elif event.type == "message_delta":
            self.output_tokens = event.usage.output_tokens or self.output_tokens
        return None

    def _start_block(self, index: int, block: Any) -> None:
        if block.type == "tool_use":
            self.blocks[index] = {"id": block.id, "name": block.name, "json": ""}
        elif block.type in _THINKING:
            self.thinking[index] = _thinking_block(block)

    def _take_delta(self, index: int, delta: Any) -> StreamEvent | None:
        if delta.type == "text_delta" and delta.text:
            self.text.append(delta.text)
            return TextDelta(delta.text)
        if delta.type == "thinking_delta" and index in self.thinking:
            self.thinking[index]["thinking"] += delta.thinking
        elif delta.type == "signature_delta" and index in self.thinking:
            self.thinking[index]["signature"] += delta.signature
        elif delta.type == "input_json_delta" and index in self.blocks:
            self.blocks[index]["json"] += delta.partial_json
        return None

    def message(self) -> Message:
        """The whole reply, with its thinking blocks kept in order for the next request."""
        usage = _usage(self.started, self.output_tokens) if self.started is not None else None
        kept = _provider_data([self.thinking[index] for index in sorted(self.thinking)])
        return Message("assistant", "".join(self.text), tool_calls=tuple(self.calls), usage=usage, provider_data=kept)


def _messages(request: ModelRequest) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []

    def add(role: str, content: str | list[dict[str, Any]]) -> None:
        if out and out[-1]["role"] == role:
            previous = out[-1]["content"]
            blocks = [{"type": "text", "text": previous}] if isinstance(previous, str) else previous
            blocks.extend([{"type": "text", "text": content}] if isinstance(content, str) else content)
            if role == "assistant":
                # Two assistant messages in a row are one turn, and a turn's thinking must come first.
                blocks.sort(key=lambda block: block["type"] not in _THINKING)
            out[-1]["content"] = blocks
        else:
            out.append({"role": role, "content": content})

    for message, results in turns(request.messages):
        if message.role == "user":
            add("user", message.content)
            continue
        blocks = _replayed_thinking(message)
        if message.content:
            blocks.append({"type": "text", "text": message.content})
        blocks.extend(
            {"type": "tool_use", "id": call.id, "name": call.name, "input": _input(call.arguments)}
            for call in message.tool_calls
        )
        if blocks:
            add("assistant", blocks)
        if results:
            add("user", [_tool_result(result) for result in results])
    return out


def _thinking_block(block: Any) -> dict[str, Any]:
    """A thinking or redacted_thinking block as the wire format has it, to be sent back unchanged."""
    if block.type == "redacted_thinking":
        return {"type": "redacted_thinking", "data": block.data}
    return {"type": "thinking", "thinking": block.thinking or "", "signature": block.signature or ""}


def _provider_data(thinking: list[dict[str, Any]]) -> dict[str, Any] | None:
    return {"anthropic": {"thinking": thinking}} if thinking else None


def _replayed_thinking(message: Message) -> list[dict[str, Any]]:
    """The thinking blocks an assistant message kept, which Anthropic wants back first in that turn."""
    kept = (message.provider_data or {}).get("anthropic")
    blocks = kept.get("thinking") if isinstance(kept, Mapping) else None
    if not isinstance(blocks, list):
        return []
    return [dict(block) for block in blocks if isinstance(block, Mapping)]


def _input(arguments: Mapping[str, Any]) -> dict[str, Any]:
    return {} if set(arguments) == {UNPARSED} else dict(arguments)


def _tool_result(result: Message) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": result.tool_call_id, "content": result.content}
    if is_error_result(result):
        block["is_error"] = True
    return block


def _tool_choice(choice: str) -> dict[str, str]:
    if choice == "required":
        return {"type": "any"}
    if choice in ("auto", "none"):
        return {"type": choice}
    return {"type": "tool", "name": choice}


def _usage(usage: Any, output_tokens: int) -> Usage:
    cached = (getattr(usage, "cache_creation_input_tokens", 0) or 0) + (
        getattr(usage, "cache_read_input_tokens", 0) or 0
    )
    return Usage(input_tokens=(usage.input_tokens or 0) + cached, output_tokens=output_tokens or 0)
