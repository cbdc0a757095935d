"""Tools: names, descriptions and schemas; sync and async execute; bad calls become error results."""

from __future__ import annotations

import asyncio
from typing import Any, Literal

import pytest

from tarry import Chat, Message, Tool, tool
from tarry.testing import ScriptedModel


class TransferMoney(Tool):
    """Moves money between two accounts."""

    def execute(self, amount: int, to: str, memo: str = "") -> str:
        return f"sent {amount} to {to}{' ' + memo if memo else ''}"


class WeatherTool(Tool):
    """Tells the weather.

    Give it a city.
    """

    async def execute(self, city: str, unit: Literal["c", "f"] = "c") -> dict[str, Any]:
        await asyncio.sleep(0)
        return {"city": city, "temperature": 21, "unit": unit}


class HTTPFetcher(Tool):
    """Fetches a page."""

    def execute(self, url: str) -> str:
        return url


class Named(Tool):
    """Has its own name."""

    name = "custom_name"

    def execute(self) -> str:
        return "ok"


def call(name: str, **arguments: Any) -> list[dict[str, Any]]:
    return [{"name": name, "arguments": arguments}]


def tool_results(chat: Chat) -> list[Any]:
    return [message.result() for message in chat.messages if message.role == "tool"]


def test_names_come_from_the_class_or_the_function() -> None:
    assert TransferMoney().name == "transfer_money"
    assert WeatherTool().name == "weather"
    assert HTTPFetcher().name == "http_fetcher"
    assert Named().name == "custom_name"

    @tool
    def look_up(term: str) -> str:
        """Looks a term up."""
        return term

    assert look_up.name == "look_up"
    assert tool(name="search")(look_up.function).name == "search"


def test_descriptions_come_from_docstrings() -> None:
    assert TransferMoney().description == "Moves money between two accounts."
    assert WeatherTool().description == "Tells the weather.\n\nGive it a city."

    @tool(description="Overridden.")
    def noop() -> None:
        """Ignored."""

    assert noop.description == "Overridden."


def test_parameters_are_a_json_schema_from_the_type_hints() -> None:
    schema = TransferMoney().parameters
    assert schema["type"] == "object"
    assert schema["properties"]["amount"]["type"] == "integer"
    assert schema["properties"]["to"]["type"] == "string"
    assert schema["properties"]["memo"] == {"type": "string", "default": ""}
    assert schema["required"] == ["amount", "to"]
    assert "title" not in schema
    weather = WeatherTool().parameters
    assert weather["properties"]["unit"]["enum"] == ["c", "f"]
    assert weather["required"] == ["city"]
    assert Named().parameters["properties"] == {}


def test_decorated_function_schema_and_it_stays_callable() -> None:
    @tool(requires_approval=True, approval_ttl=60)
    async def delete_file(path: str, force: bool = False) -> str:
        """Deletes a file."""
        return f"deleted {path}"

    assert delete_file.name == "delete_file"
    assert delete_file.description == "Deletes a file."
    assert delete_file.requires_approval is True
    assert delete_file.approval_ttl == 60
    assert delete_file.parameters["properties"]["force"]["type"] == "boolean"
    assert delete_file.parameters["required"] == ["path"]
    assert asyncio.run(delete_file("a.txt")) == "deleted a.txt"


def test_the_model_is_shown_each_tools_schema() -> None:
    model = ScriptedModel(["hi"])
    chat = Chat(model=model, tools=[TransferMoney(), WeatherTool()])
    chat.ask_sync("hello")
    schemas = {schema.name: schema for schema in model.requests[0].tools}
    assert set(schemas) == {"transfer_money", "weather"}
    assert schemas["transfer_money"].description == "Moves money between two accounts."
    assert schemas["transfer_money"].parameters == TransferMoney().parameters


def test_two_tools_with_one_name_are_a_value_error() -> None:
    @tool
    def weather(city: str) -> str:
        """Another weather."""
        return city

    with pytest.raises(ValueError, match="'weather'"):
        Chat(model=ScriptedModel([]), tools=[WeatherTool(), weather])


def test_tools_must_be_a_list_of_tools() -> None:
    with pytest.raises(TypeError, match="list of tools"):
        Chat(model=ScriptedModel([]), tools=TransferMoney())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be a Tool or a function"):
        Chat(model=ScriptedModel([]), tools=["weather"])  # type: ignore[list-item]


def test_plain_functions_become_tools() -> None:
    def shout(text: str) -> str:
        """Shouts."""
        return text.upper()

    chat = Chat(model=ScriptedModel([call("shout", text="hey"), "done"]), tools=[shout])
    chat.ask_sync("go")
    assert tool_results(chat) == ["HEY"]


def test_tool_parameters_must_be_named() -> None:
    class Splat(Tool):
        """Takes anything."""

        def execute(self, *items: str) -> str:
            return ""

    with pytest.raises(TypeError, match=r"\*items"):
        _ = Splat().parameters


async def test_sync_and_async_execute_both_run() -> None:
    model = ScriptedModel(
        [
            [
                {"name": "transfer_money", "arguments": {"amount": 5, "to": "bob"}},
                {"name": "weather", "arguments": {"city": "Oslo"}},
            ],
            "done",
        ]
    )
    chat = Chat(model=model, tools=[TransferMoney(), WeatherTool()])
    reply = await chat.ask("go")
    assert reply is not None
    assert reply.content == "done"
    # Text is kept verbatim; anything else becomes JSON. Results are appended as they finish.
    transfer, weather = chat.messages[1].tool_calls
    by_call = {message.tool_call_id: message for message in chat.messages if message.role == "tool"}
    assert by_call[transfer.id].content == "sent 5 to bob"
    assert by_call[weather.id].result() == {"city": "Oslo", "temperature": 21, "unit": "c"}
    assert by_call[weather.id].content.startswith("{")


async def test_validated_arguments_reach_execute() -> None:
    seen: list[Any] = []

    @tool
    def record(count: int, tags: list[str]) -> str:
        """Records."""
        seen.append((count, tags))
        return "ok"

    chat = Chat(model=ScriptedModel([call("record", count="3", tags=["a"]), "done"]), tools=[record])
    await chat.ask("go")
    assert seen == [(3, ["a"])]


async def test_unknown_tool_is_an_error_result_naming_the_available_tools() -> None:
    chat = Chat(model=ScriptedModel([call("teleport", to="mars"), "sorry"]), tools=[TransferMoney(), WeatherTool()])
    reply = await chat.ask("go")
    assert reply is not None
    assert reply.content == "sorry"
    [result] = tool_results(chat)
    assert "teleport" in result["error"]
    assert "transfer_money" in result["error"]
    assert "weather" in result["error"]


async def test_unknown_tool_in_a_chat_without_tools() -> None:
    chat = Chat(model=ScriptedModel([call("teleport"), "sorry"]))
    await chat.ask("go")
    [result] = tool_results(chat)
    assert "teleport" in result["error"]
    assert "none" in result["error"]


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ({"to": "bob"}, "amount"),
        ({"amount": "lots", "to": "bob"}, "amount"),
        ({"amount": 5, "to": "bob", "extra": 1}, "extra"),
        ({"amount": 5, "to": ["bob"]}, "to"),
    ],
)
async def test_invalid_arguments_are_an_error_result_naming_the_problem(arguments: dict[str, Any], named: str) -> None:
    runs: list[Any] = []

    class Transfer(Tool):
        """Moves money."""

        def execute(self, amount: int, to: str) -> str:
            runs.append(amount)
            return "sent"

    chat = Chat(model=ScriptedModel([call("transfer", **arguments), "fixed"]), tools=[Transfer()])
    await chat.ask("go")
    [result] = tool_results(chat)
    assert "Invalid arguments for transfer" in result["error"]
    assert named in result["error"]
    assert runs == []


@pytest.mark.parametrize("asynchronous", [False, True])
async def test_exceptions_become_error_results_and_the_chat_goes_on(asynchronous: bool) -> None:
    if asynchronous:

        @tool
        async def explode(reason: str) -> str:
            """Fails."""
            raise RuntimeError(f"boom: {reason}")

    else:

        @tool
        def explode(reason: str) -> str:
            """Fails."""
            raise RuntimeError(f"boom: {reason}")

    model = ScriptedModel([call("explode", reason="why"), "it failed"])
    chat = Chat(model=model, tools=[explode])
    reply = await chat.ask("go")
    assert reply == Message("assistant", "it failed")
    [result] = tool_results(chat)
    assert result == {"error": "The explode call raised RuntimeError: boom: why"}
    # The model saw the error result on its next request.
    assert model.requests[1].messages[-1].result() == result


def test_a_tool_call_error_needs_a_message_and_keeps_error_for_it() -> None:
    from tarry.errors import ToolCallError

    assert ToolCallError("no such order", retry=False).details == {"retry": False}
    with pytest.raises(ValueError, match="needs a message"):
        ToolCallError("  ")
    with pytest.raises(ValueError, match="cannot be named 'error'"):
        ToolCallError("no such order", error="x")
