"""The transcript's vocabulary and the interface every model adapter implements."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic_core import to_jsonable_python

Role = Literal["user", "assistant", "tool"]
"""Who wrote a message: the person, the model, or a tool's result."""
ROLES: tuple[Role, ...] = ("user", "assistant", "tool")
"""Every role, in the order a turn goes through them."""
ToolChoice = str
"""``"auto"``, ``"none"``, ``"required"`` or the name of a tool."""


@dataclass(frozen=True)
class ToolCall:
    """One call the model asked for: its provider id, the tool's name and the arguments as sent.

    ``provider_data`` is opaque, JSON-safe state a provider needs back with this call on the next
    request (Gemini's thought signature, for one), keyed by provider name. Each adapter owns its
    key and ignores everyone else's, so a chat can switch providers.
    """

    id: str
    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    provider_data: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise ValueError(f"A tool call needs a non-empty str id, got {self.id!r}")
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"A tool call needs a non-empty str name, got {self.name!r}")
        if not isinstance(self.arguments, Mapping):
            raise TypeError(f"Tool call {self.name!r}: arguments must be a dict, got {type(self.arguments).__name__}")
        _check_provider_data(self.provider_data)


@dataclass(frozen=True)
class Usage:
    """Tokens a model request used, as the provider counted them."""

    input_tokens: int = 0
    output_tokens: int = 0


@dataclass(frozen=True)
class Message:
    """One entry of the transcript.

    ``role`` is ``"user"``, ``"assistant"`` or ``"tool"``. An assistant message may carry
    ``tool_calls``; a tool message answers exactly one of them through ``tool_call_id``.

    ``provider_data`` is opaque, JSON-safe state a provider needs back with this message on the
    next request (Anthropic's thinking blocks, for one), keyed by provider name: each adapter owns
    its key and ignores everyone else's, so a chat can switch providers. A store keeps it as it is.
    """

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    usage: Usage | None = None
    provider_data: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"Message role must be one of {', '.join(ROLES)}; got {self.role!r}")
        if not isinstance(self.content, str):
            raise TypeError(f"Message content must be str, got {type(self.content).__name__}")
        object.__setattr__(self, "tool_calls", tuple(self.tool_calls))
        if self.tool_calls and self.role != "assistant":
            raise ValueError("Only assistant messages can call tools")
        if (self.role == "tool") != (self.tool_call_id is not None):
            raise ValueError("A tool message needs a tool_call_id, and only a tool message has one")
        _check_provider_data(self.provider_data)

    def result(self) -> Any:
        """A tool message's content decoded from JSON, or the text itself when it is not JSON."""
        try:
            return json.loads(self.content)
        except ValueError:
            return self.content


def _check_provider_data(value: Any) -> None:
    if value is not None and not isinstance(value, Mapping):
        raise TypeError(f"provider_data must be a dict keyed by provider name, got {type(value).__name__}")


def result_text(value: Any) -> str:
    """The content of a tool message for ``value``: text verbatim, anything else as JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(to_jsonable_python(value), ensure_ascii=False)


@dataclass(frozen=True)
class ToolSchema:
    """What a model is told about one tool."""

    name: str
    description: str
    parameters: Mapping[str, Any]


@dataclass(frozen=True)
class ModelRequest:
    """Everything a model adapter needs for one request."""

    messages: Sequence[Message]
    tools: Sequence[ToolSchema] = ()
    instructions: str | None = None
    tool_choice: ToolChoice | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TextDelta:
    """A piece of the assistant's text, as it streams in."""

    text: str


@dataclass(frozen=True)
class ToolCallEvent:
    """The model finished asking for one tool call while streaming."""

    call: ToolCall


@dataclass(frozen=True)
class MessageDone:
    """The streamed reply is complete; ``message`` is what the transcript records."""

    message: Message


StreamEvent = TextDelta | ToolCallEvent | MessageDone
"""What a streamed reply yields: text as it arrives, each call the model asks for, then the whole message."""


@runtime_checkable
class Model(Protocol):
    """A model adapter: turns a request into the assistant's next message."""

    @property
    def name(self) -> str:
        """``"provider:model"``, as a persisted chat records it."""
        ...

    async def complete(self, request: ModelRequest) -> Message:
        """Send one request and return the assistant's reply."""
        ...


@runtime_checkable
class StreamingModel(Model, Protocol):
    """A model adapter that can also stream its reply."""

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Send one request and yield its reply as it arrives, ending with
        [`MessageDone`][tarry.messages.MessageDone]."""
        ...
