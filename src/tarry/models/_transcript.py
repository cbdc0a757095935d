"""What every adapter needs from the transcript: turns with their results, ids, and arguments."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from tarry.messages import Message

UNPARSED = "_unparsed_arguments"
"""The key that carries a tool call's arguments when the model sent something that is not a JSON object."""


def turns(messages: Sequence[Message]) -> Iterator[tuple[Message, tuple[Message, ...]]]:
    """Each user and assistant message, an assistant one with the results of its calls in call order.

    Tool messages are attached to the message that made their call, wherever they sit in
    the transcript, so an adapter can group them as its wire format needs.
    """
    results = {message.tool_call_id: message for message in messages if message.role == "tool"}
    for message in messages:
        if message.role == "tool":
            continue
        found = tuple(results[call.id] for call in message.tool_calls if call.id in results)
        yield message, found


def parse_arguments(text: str | None) -> dict[str, Any]:
    """A tool call's arguments from the JSON text a model sent; anything else is kept under ``UNPARSED``."""
    if not text or not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {UNPARSED: text}
    return dict(value) if isinstance(value, dict) else {UNPARSED: text}


def arguments_text(arguments: Mapping[str, Any]) -> str:
    """The JSON text of a call's arguments, as OpenAI-style providers take them back."""
    if set(arguments) == {UNPARSED} and isinstance(arguments[UNPARSED], str):
        return str(arguments[UNPARSED])
    return json.dumps(dict(arguments), ensure_ascii=False)


def new_call_id() -> str:
    """A fresh tool call id for providers that send calls without one."""
    return f"call_{uuid.uuid4().hex}"


def is_error_result(message: Message) -> bool:
    """Whether a tool message is one of tarry's error results (a JSON object with an ``"error"`` key)."""
    value = message.result()
    return isinstance(value, dict) and "error" in value
