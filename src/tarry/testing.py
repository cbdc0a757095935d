"""A scripted model for tests and demos: each request takes the next turn of a script."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tarry.clock import advance as advance_clock
from tarry.clock import reset as reset_clock
from tarry.errors import TarryError
from tarry.messages import Message, ModelRequest, ToolCall

__all__ = ["ScriptedModel", "ScriptedTurn", "Turn", "advance_clock", "reset_clock"]

Turn = str | Sequence[Mapping[str, Any]]
ScriptedTurn = Turn | Callable[[list[Message]], Turn]


class ScriptedModel:
    """A model that replies from a script, for tests and demos.

    Each request uses the next turn: a ``str`` is the assistant's text; a list of
    ``{"name": ..., "arguments": {...}}`` are tool calls (their ids are made up, unique
    across processes, unless a call gives its ``"id"``); a callable receives the transcript and
    returns either.

    >>> model = ScriptedModel([[{"name": "add", "arguments": {"a": 1, "b": 2}}], "3"])
    >>> model.turns_left
    2
    """

    def __init__(self, turns: Sequence[ScriptedTurn], *, name: str = "scripted") -> None:
        if isinstance(turns, str) or not isinstance(turns, Sequence):
            raise TypeError("ScriptedModel takes a list of turns")
        self.turns = list(turns)
        self.requests: list[ModelRequest] = []
        """Every request the model received, in order."""
        self._name = name

    @property
    def name(self) -> str:
        """``"scripted:<name>"``."""
        return f"scripted:{self._name}"

    @property
    def turns_left(self) -> int:
        """How many turns the script still holds."""
        return len(self.turns) - len(self.requests)

    async def complete(self, request: ModelRequest) -> Message:
        """Reply with the next turn of the script."""
        number = len(self.requests) + 1
        if number > len(self.turns):
            raise TarryError(f"ScriptedModel ran out of turns: request {number} found only {len(self.turns)} turn(s)")
        self.requests.append(request)
        turn = self.turns[number - 1]
        if callable(turn):
            turn = turn(list(request.messages))
        return _reply(turn, number)


def _reply(turn: Any, number: int) -> Message:
    if isinstance(turn, str):
        return Message("assistant", turn)
    if not isinstance(turn, Sequence):
        raise TarryError(f"ScriptedModel turn {number} must be text or a list of tool calls, got {turn!r}")
    calls = []
    for item in turn:
        if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
            raise TarryError(
                f"ScriptedModel turn {number}: a tool call is {{'name': str, 'arguments': dict}}, got {item!r}"
            )
        call_id = item.get("id") or f"call_{uuid.uuid4().hex}"
        calls.append(ToolCall(call_id, item["name"], dict(item.get("arguments") or {})))
    return Message("assistant", "", tool_calls=tuple(calls))
