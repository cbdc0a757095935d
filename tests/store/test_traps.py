"""Traps a newcomer fell into with the store, and what tarry does now: refuse clearly, lose nothing."""

from __future__ import annotations

import json

import pytest

from tarry import Task, Tool
from tarry.errors import MissingToolsError
from tarry.store import Store
from tests.store.tools import TransferMoney, reactive_model

PAY = [{"name": "transfer_money", "arguments": {"to": "Bob", "amount": 5}}]


async def test_carrying_on_without_the_tool_of_an_approved_call_is_refused_and_uses_nothing_up(store: Store) -> None:
    chat = await store.create_chat(reactive_model(PAY), [TransferMoney()])
    await chat.ask("Pay Bob 5")
    [approval] = await store.pending_questions(chat.id)
    assert await store.approve(approval.id) is True

    toolless = await store.load_chat(chat.id, reactive_model(PAY))
    with pytest.raises(MissingToolsError, match="transfer_money") as refused:
        await toolless.complete()
    assert refused.value.names == ["transfer_money"]
    assert toolless.waiting
    assert [message.role for message in toolless.messages] == ["user", "assistant"]

    again = await store.load_chat(chat.id, reactive_model(PAY), [TransferMoney()])
    assert [message.role for message in again.messages] == ["user", "assistant"], "nothing was recorded"
    reply = await again.complete()
    assert again.messages[2].content == "Sent 5 to Bob"
    assert reply is not None and reply.content == "All done."


async def test_a_call_to_a_tool_the_model_made_up_still_gets_an_error_result(store: Store) -> None:
    chat = await store.create_chat(reactive_model([{"name": "fly_to_mars", "arguments": {}}]), [TransferMoney()])
    reply = await chat.ask("Go to Mars")
    assert "Unknown tool 'fly_to_mars'" in json.loads(chat.messages[2].content)["error"]
    assert reply is not None and not chat.waiting


class Confirm(Tool):
    """Asks a person for a code and defines no resume()."""

    def execute(self, order: str) -> Task:
        return self.ask(f"Code for {order}?", code=str)


class Visit(Tool):
    """Asks a person to visit a page and defines no resume()."""

    def execute(self) -> Task:
        return self.ask("Please sign the form", url="https://example.com/sign")


@pytest.mark.parametrize(
    ("tool", "call", "answer", "result"),
    [
        (Confirm(), {"name": "confirm", "arguments": {"order": "A1"}}, {"code": "xyz"}, {"code": "xyz"}),
        (Visit(), {"name": "visit", "arguments": {}}, {}, "accepted"),
    ],
)
async def test_a_tool_that_only_asks_gives_the_model_the_answer(
    store: Store, tool: Tool, call: dict, answer: dict, result: object
) -> None:
    chat = await store.create_chat(reactive_model([call]), [tool])
    await chat.ask("Go")
    [question] = await store.pending_questions(chat.id)
    assert await store.answer(question.id, **answer) is True
    reply = await chat.complete()
    assert reply is not None and reply.content == "All done."
    assert chat.messages[2].result() == result
    assert not chat.waiting
