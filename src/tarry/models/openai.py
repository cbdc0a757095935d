"""OpenAI's chat completions API, and every server that speaks it (Ollama, vLLM, llama.cpp, OpenRouter)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from tarry.errors import ProviderError
from tarry.messages import Message, MessageDone, ModelRequest, StreamEvent, TextDelta, ToolCall, ToolCallEvent, Usage
from tarry.models._errors import body_message, provider_error
from tarry.models._hosted import HostedModel
from tarry.models._sdk import require
from tarry.models._transcript import arguments_text, new_call_id, parse_arguments, turns

if TYPE_CHECKING:
    import openai

OLLAMA_URL = "http://127.0.0.1:11434/v1"
_RESERVED = {"model", "messages", "tools", "tool_choice", "stream", "stream_options"}
_WIRE_ID = re.compile(r"[A-Za-z0-9_-]{1,40}")
"""Tool-call ids every server takes back: OpenAI refuses ids longer than 40 characters."""


class OpenAI(HostedModel["openai.AsyncOpenAI"]):
    """A model behind OpenAI's chat completions API.

    >>> OpenAI("gpt-4.1-mini", api_key="sk-...").name
    'openai:gpt-4.1-mini'

    ``api_key`` defaults to ``OPENAI_API_KEY``, ``base_url`` to ``OPENAI_BASE_URL`` or OpenAI's.
    Rate limits, timeouts and server errors are retried ``max_retries`` times with backoff
    by the SDK. ``client`` takes a ready ``openai.AsyncOpenAI`` instead.
    """

    provider = "openai"
    stream_usage = True
    """Whether a streamed request asks for usage figures (``stream_options``); some servers refuse it."""
    required_tool_choice = True
    """Whether the server takes ``tool_choice="required"``; without it, several tools fall back to ``"auto"``."""
    _max_tokens_name = "max_completion_tokens"
    _dropped_settings: frozenset[str] = frozenset({"top_k"})

    def __init__(
        self,
        model: str,
        api_key: str | None = None,
        base_url: str | None = None,
        *,
        organization: str | None = None,
        max_retries: int = 2,
        timeout: float | None = None,
        default_headers: Mapping[str, str] | None = None,
        client: openai.AsyncOpenAI | None = None,
    ) -> None:
        super().__init__(model, client)
        self._sdk = require("openai", "openai")
        self.base_url = base_url
        self._options: dict[str, Any] = {
            "api_key": api_key,
            "base_url": base_url,
            "organization": organization,
            "max_retries": max_retries,
            "default_headers": default_headers,
        }
        if timeout is not None:
            self._options["timeout"] = timeout

    def _make_client(self) -> openai.AsyncOpenAI:
        try:
            client: openai.AsyncOpenAI = self._sdk.AsyncOpenAI(**self._options)
        except self._sdk.OpenAIError as error:
            raise provider_error(self.provider, str(error), codes=("invalid_api_key",)) from error
        return client

    async def complete(self, request: ModelRequest) -> Message:
        """Send one chat completions request and return the assistant's reply."""
        body = self.request_body(request)
        try:
            completion = await self.client.chat.completions.create(**body)
        except self._sdk.OpenAIError as error:
            raise self._error(error) from error
        if not completion.choices:
            raise ProviderError(f"{self.provider}: the reply held no choices", provider=self.provider)
        reply = completion.choices[0].message
        calls = tuple(
            ToolCall(call.id or new_call_id(), call.function.name, parse_arguments(call.function.arguments))
            for call in reply.tool_calls or ()
            if call.type == "function"
        )
        return Message(
            "assistant", reply.content or reply.refusal or "", tool_calls=calls, usage=_usage(completion.usage)
        )

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Stream one request: text deltas, each tool call once complete, then the whole message."""
        body: dict[str, Any] = {**self.request_body(request), "stream": True}
        if self.stream_usage:
            body["stream_options"] = {"include_usage": True}
        reply = _StreamedReply()
        try:
            chunks = await self.client.chat.completions.create(**body)
            async with chunks:
                async for chunk in chunks:
                    for event in reply.take(chunk):
                        yield event
        except self._sdk.OpenAIError as error:
            raise self._error(error) from error
        for event in reply.finish_calls():
            yield event
        yield MessageDone(reply.message())

    def request_body(self, request: ModelRequest) -> dict[str, Any]:
        """The keyword arguments of ``chat.completions.create`` for ``request``."""
        body: dict[str, Any] = {"model": self.model, "messages": _messages(request)}
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": schema.name,
                        "description": schema.description,
                        "parameters": dict(schema.parameters),
                    },
                }
                for schema in request.tools
            ]
            if request.tool_choice is not None:
                body["tool_choice"] = self._tool_choice(request.tool_choice, request)
        extra = self._settings(request.settings)
        if extra:
            body["extra_body"] = extra
        return body

    def _tool_choice(self, choice: str, request: ModelRequest) -> Any:
        if choice == "required" and len(request.tools) == 1:
            choice = request.tools[0].name  # the same demand, in the form every server takes
        elif choice == "required" and not self.required_tool_choice:
            choice = "auto"
        if choice in ("auto", "none", "required"):
            return choice
        return {"type": "function", "function": {"name": choice}}

    def _settings(self, settings: Mapping[str, Any]) -> dict[str, Any]:
        reserved = _RESERVED & set(settings)
        if reserved:
            raise ValueError(f"Chat settings cannot set {', '.join(sorted(reserved))}; the chat sends those")
        mapped: dict[str, Any] = {}
        for key, value in settings.items():
            if key in self._dropped_settings:
                continue
            mapped[self._max_tokens_name if key == "max_tokens" else key] = value
        return mapped

    def _error(self, error: Exception) -> ProviderError:
        sdk = self._sdk
        if isinstance(error, sdk.APIStatusError):
            message = body_message(error.body) or error.message
            if error.status_code == 404 and self.base_url and not self.base_url.rstrip("/").endswith("/v1"):
                message += (
                    f" (no chat completions at {error.request.url}: OpenAI-compatible servers usually serve them "
                    "under /v1, so base_url ends with /v1)"
                )
            return provider_error(
                self.provider,
                message,
                status=error.status_code,
                codes=(error.code, error.type),
                headers=error.response.headers,
            )
        if isinstance(error, sdk.APIError):
            return provider_error(
                self.provider, body_message(error.body) or error.message, codes=(error.code, error.type)
            )
        return ProviderError(f"{self.provider}: {error}", provider=self.provider)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


class OpenAICompatible(OpenAI):
    """A model behind any server that speaks OpenAI's chat completions API.

    >>> OpenAICompatible("llama3.2", base_url="http://127.0.0.1:11434/v1", provider="ollama").name
    'ollama:llama3.2'

    Ollama, vLLM, llama.cpp's server, OpenRouter and the like. ``api_key`` is sent when
    given (never ``OPENAI_API_KEY``). ``provider`` is the first half of ``name``; a
    persisted chat resolves it by that name when loaded, so pass the model again when
    loading a chat whose provider is not registered.

    Servers differ in what they accept; the requests use the forms all of them take (an
    assistant message that only calls tools has ``""`` as its content, call ids are at most
    40 characters, ``parallel_tool_calls`` is never sent, ``tool_choice="required"`` with one
    tool names it). Two things are settings: ``stream_usage=False`` for a server that refuses
    ``stream_options``, and ``required_tool_choice=False`` for one that refuses
    ``tool_choice="required"`` (llama-cpp-python's): with several tools that choice is then
    sent as ``"auto"``.
    """

    _max_tokens_name = "max_tokens"
    _dropped_settings: frozenset[str] = frozenset()

    def __init__(
        self,
        model: str,
        base_url: str,
        api_key: str | None = None,
        *,
        provider: str = "openai-compatible",
        stream_usage: bool = True,
        required_tool_choice: bool = True,
        max_retries: int = 2,
        timeout: float | None = None,
        default_headers: Mapping[str, str] | None = None,
        client: openai.AsyncOpenAI | None = None,
    ) -> None:
        if not isinstance(base_url, str) or not base_url:
            raise ValueError(f"OpenAICompatible needs the server's base_url, got {base_url!r}")
        super().__init__(
            model,
            api_key=api_key or "not-needed",
            base_url=base_url,
            max_retries=max_retries,
            timeout=timeout,
            default_headers=default_headers,
            client=client,
        )
        self.provider = provider
        self.stream_usage = stream_usage
        self.required_tool_choice = required_tool_choice


def ollama(model: str) -> OpenAICompatible:
    """The ``ollama:`` provider: a model served by Ollama on this machine."""
    return OpenAICompatible(model, base_url=OLLAMA_URL, provider="ollama")


class _StreamedReply:
    """What a streamed reply has said so far: its text, its usage, the calls complete and those still arriving."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.pending: dict[int, dict[str, str]] = {}
        self.calls: list[ToolCall] = []
        self.usage: Usage | None = None

    def take(self, chunk: Any) -> Iterator[StreamEvent]:
        """The events one chunk completes: its text, and the calls it shows are whole."""
        if chunk.usage is not None:
            self.usage = _usage(chunk.usage)
        for choice in chunk.choices[:1]:
            delta = choice.delta
            if delta.content:
                self.text.append(delta.content)
                yield TextDelta(delta.content)
            for fragment in delta.tool_calls or ():
                yield from self._take_fragment(fragment)
            if choice.finish_reason is not None:
                yield from self.finish_calls()

    def _take_fragment(self, fragment: Any) -> Iterator[StreamEvent]:
        # A fragment of a later call means every call before it is whole.
        index = fragment.index if fragment.index is not None else len(self.pending)
        yield from self.finish_calls(before=index)
        part = self.pending.setdefault(index, {"id": "", "name": "", "arguments": ""})
        part["id"] = part["id"] or (fragment.id or "")
        if fragment.function is not None:
            # Names come whole; llama-cpp-python repeats the name in every fragment.
            part["name"] = part["name"] or (fragment.function.name or "")
            part["arguments"] += fragment.function.arguments or ""

    def finish_calls(self, before: int | None = None) -> Iterator[StreamEvent]:
        """A tool call event for each pending call (those at an index below ``before``, if given), in order."""
        for done in sorted(index for index in self.pending if before is None or index < before):
            self.calls.append(_call(self.pending.pop(done)))
            yield ToolCallEvent(self.calls[-1])

    def message(self) -> Message:
        """The whole reply."""
        return Message("assistant", "".join(self.text), tool_calls=tuple(self.calls), usage=self.usage)


def _messages(request: ModelRequest) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if request.instructions:
        out.append({"role": "system", "content": request.instructions})
    for message, results in turns(request.messages):
        if message.role == "user":
            out.append({"role": "user", "content": message.content})
            continue
        # Content is always a string, "" when the message only calls tools: llama.cpp's server
        # refuses null and its chat templates need the key, while OpenAI, Ollama and vLLM take "".
        entry: dict[str, Any] = {"role": "assistant", "content": message.content}
        if message.tool_calls:
            entry["tool_calls"] = [
                {
                    "id": _wire_id(call.id),
                    "type": "function",
                    "function": {"name": call.name, "arguments": arguments_text(call.arguments)},
                }
                for call in message.tool_calls
            ]
        out.append(entry)
        out.extend(
            {"role": "tool", "tool_call_id": _wire_id(result.tool_call_id), "content": result.content}
            for result in results
        )
    return out


def _wire_id(call_id: str | None) -> str:
    """A call's id as sent back: kept when every server takes it, else a stable id derived from it."""
    if call_id and _WIRE_ID.fullmatch(call_id):
        return call_id
    return "call_" + hashlib.sha256(str(call_id).encode()).hexdigest()[:32]


def _usage(usage: Any) -> Usage | None:
    if usage is None:
        return None
    return Usage(input_tokens=usage.prompt_tokens or 0, output_tokens=usage.completion_tokens or 0)


def _call(part: dict[str, str]) -> ToolCall:
    return ToolCall(part["id"] or new_call_id(), part["name"], parse_arguments(part["arguments"]))
