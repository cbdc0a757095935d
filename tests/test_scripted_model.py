"""ScriptedModel: the model of tests and demos."""

from __future__ import annotations

from typing import Any

import pytest

from tarry import Chat, Message, ToolCall, tool
from tarry.errors import TarryError
from tarry.testing import ScriptedModel


@tool
def add(a: int, b: int) -> int:
    """Adds two numbers."""
    return a + b


def test_text_turns() -> None:
    model = ScriptedModel(["Hello", "Again"])
    chat = Chat(model=model)
    assert chat.ask_sync("hi") == Message("assistant", "Hello")
    assert model.turns_left == 1
    assert chat.ask_sync("hi again") == Message("assistant", "Again")
    assert model.turns_left == 0
    assert model.name == "scripted:scripted"
    assert ScriptedModel([], name="demo").name == "scripted:demo"


def test_tool_call_turns_make_up_unique_ids() -> None:
    turn = [{"name": "add", "arguments": {"a": 1, "b": 2}}, {"name": "add", "arguments": {"a": 3, "b": 4}}]
    model = ScriptedModel([turn, turn, "7 and 3"])
    chat = Chat(model=model, tools=[add])
    chat.ask_sync("add")
    first = chat.messages[1]
    assert first.role == "assistant"
    assert first.content == ""
    assert [(call.name, dict(call.arguments)) for call in first.tool_calls] == [
        ("add", {"a": 1, "b": 2}),
        ("add", {"a": 3, "b": 4}),
    ]
    assert all(isinstance(call, ToolCall) for call in first.tool_calls)
    ids = [call.id for message in chat.messages for call in message.tool_calls]
    assert len(ids) == 4
    assert len(set(ids)) == 4
    assert sorted(m.content for m in chat.messages if m.role == "tool") == ["3", "3", "7", "7"]


def test_a_tool_call_without_arguments() -> None:
    model = ScriptedModel([[{"name": "ping"}], "pong"])

    @tool
    def ping() -> str:
        """Pings."""
        return "pong!"

    chat = Chat(model=model, tools=[ping])
    chat.ask_sync("ping")
    assert dict(chat.messages[1].tool_calls[0].arguments) == {}


def test_callable_turns_see_the_transcript() -> None:
    seen: list[list[Message]] = []

    def sum_up(messages: list[Message]) -> str:
        seen.append(messages)
        return f"The sum is {messages[-1].content}"

    def call_add(messages: list[Message]) -> list[dict[str, Any]]:
        return [{"name": "add", "arguments": {"a": len(messages[0].content), "b": 1}}]

    model = ScriptedModel([call_add, sum_up])
    chat = Chat(model=model, tools=[add])
    reply = chat.ask_sync("four")
    assert reply == Message("assistant", "The sum is 5")
    [transcript] = seen
    assert [message.role for message in transcript] == ["user", "assistant", "tool"]


def test_requests_are_recorded() -> None:
    model = ScriptedModel(["ok"])
    Chat(model=model, tools=[add], instructions="Be exact.").ask_sync("hi")
    [request] = model.requests
    assert request.instructions == "Be exact."
    assert [schema.name for schema in request.tools] == ["add"]
    assert list(request.messages) == [Message("user", "hi")]


def test_running_out_of_turns_names_the_turn() -> None:
    model = ScriptedModel(["only one"])
    chat = Chat(model=model)
    chat.ask_sync("one")
    with pytest.raises(TarryError, match="request 2") as raised:
        chat.ask_sync("two")
    assert "1 turn" in str(raised.value)


@pytest.mark.parametrize(
    ("turn", "says"),
    [
        (42, "turn 1 must be text or a list"),
        ([{"arguments": {}}], "turn 1: a tool call is"),
        (["add"], "turn 1: a tool call is"),
    ],
)
def test_bad_turns_name_the_turn(turn: Any, says: str) -> None:
    chat = Chat(model=ScriptedModel([turn]), tools=[add])
    with pytest.raises(TarryError, match=says):
        chat.ask_sync("go")


def test_a_callable_turn_returning_nonsense_is_refused() -> None:
    chat = Chat(model=ScriptedModel([lambda messages: 3.5]))
    with pytest.raises(TarryError, match="turn 1"):
        chat.ask_sync("go")


@pytest.mark.parametrize("turns", ["hello", None, 5])
def test_turns_must_be_a_list(turns: Any) -> None:
    with pytest.raises(TypeError, match="list of turns"):
        ScriptedModel(turns)
