"""Traps a newcomer fell into with the store, and what tarry does now: refuse clearly, lose nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tarry import Field, Task, Tool
from tarry.errors import MissingToolsError
from tarry.running import run_sync
from tarry.store import Store
from tarry.tools import ask
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


def test_a_synchronous_script_uses_the_store_without_asyncio(database_url: str) -> None:
    with Store(database_url) as store:
        store.setup_sync()
        chat = store.create_chat_sync(reactive_model([*PAY, {"name": "confirm", "arguments": {"order": "B2"}}]),
                                      [TransferMoney(), Confirm()])  # fmt: skip
        chat.ask_sync("Pay and confirm")
        approval, code = store.pending_questions_sync(chat.id)
        assert store.question_sync(code.id).fields[0].name == "code"
        assert store.pending_tasks_sync(chat.id) == []
        assert store.approve_sync(approval.id) is True
        assert store.approve_sync(approval.id) is False
        assert store.answer_sync(code.id, "k9") is True
        loaded = store.load_chat_sync(chat.id, reactive_model(PAY), [TransferMoney(), Confirm()])
        assert loaded.complete_sync() is not None
        *results, final = [message.content for message in loaded.messages[2:]]
        assert sorted(results) == ["Sent 5 to Bob", '{"code": "k9"}']  # the two calls run at once
        assert final == "All done."
        assert store.cancel_sync(chat.id) is True
    with Store(database_url) as again:
        declined = again.start_chat_sync("Pay", reactive_model(PAY), [TransferMoney()])
        [approval] = again.pending_questions_sync(declined.id)
        assert again.decline_sync(approval.id, "no") is True


@pytest.mark.parametrize(("durability", "expected"), [("full", "2"), ("fast", "1")])
def test_sqlite_syncs_every_commit_unless_told_to_be_fast(tmp_path: Path, durability: str, expected: str) -> None:
    with Store(f"sqlite:///{tmp_path / 'chats.db'}", durability=durability) as store:  # type: ignore[arg-type]
        store.setup_sync()
        level = run_sync(
            store.db.run_read(lambda connection: connection.exec_driver_sql("PRAGMA synchronous").scalar())
        )
        assert str(level) == expected  # SQLite's numbers: 2 is FULL, 1 is NORMAL


@pytest.mark.parametrize(("durability", "expected"), [("full", "on"), ("fast", "off")])
def test_postgresql_commits_synchronously_unless_told_to_be_fast(
    postgres_url: str, durability: str, expected: str
) -> None:
    with Store(postgres_url, durability=durability) as store:  # type: ignore[arg-type]
        store.setup_sync()
        level = run_sync(
            store.db.run_read(lambda connection: connection.exec_driver_sql("SHOW synchronous_commit").scalar())
        )
        assert level == expected
        store.create_chat_sync()  # the schema is still found: the URL's own options are kept


@pytest.mark.parametrize(
    "url",
    [
        "sqlite://",
        "sqlite:///:memory:",
        "sqlite:///file:chats?mode=memory&uri=true",
        "sqlite:///file::memory:?uri=true",
    ],
)
def test_an_in_memory_sqlite_database_is_refused_with_what_to_use_instead(url: str) -> None:
    with pytest.raises(ValueError, match=r"tarry needs a SQLite file.*use a file in a temporary folder"):
        Store(url)


def test_durability_names_its_choices() -> None:
    with pytest.raises(ValueError, match="durability must be 'full' or 'fast'"):
        Store("sqlite:///x.db", durability="paranoid")  # type: ignore[arg-type]


async def test_without_its_tool_a_declined_call_still_closes_and_a_waiting_one_still_parks(store: Store) -> None:
    chat = await store.create_chat(reactive_model(PAY), [TransferMoney()])
    await chat.ask("Pay Bob 5")
    [approval] = await store.pending_questions(chat.id)

    waiting = await store.load_chat(chat.id, reactive_model(PAY))
    assert await waiting.complete() is not None and waiting.waiting  # nothing to run yet: it parks

    assert await store.decline(approval.id, "not today") is True
    declined = await store.load_chat(chat.id, reactive_model(PAY))
    reply = await declined.complete()  # closing a declined call runs no tool
    assert declined.messages[2].result() == {"error": "The user declined the transfer_money call.", "note": "not today"}
    assert reply is not None and reply.content == "All done."


class Schedule(Tool):
    """Asks for a day and a time at once, or for an optional comment; defines no resume()."""

    def execute(self, kind: str) -> Task:
        if kind == "optional":
            return self.ask("Any comment?", comment=Field(required=False))
        return Task(status="input_required").with_question(ask("Which day?", day=str), ask("What time?", time=str))


async def test_the_default_resume_gives_every_answer_and_an_empty_form_answer_as_it_is(store: Store) -> None:
    calls = [
        {"name": "schedule", "arguments": {"kind": "both"}},
        {"name": "schedule", "arguments": {"kind": "optional"}},
    ]
    chat = await store.create_chat(reactive_model(calls), [Schedule()])
    await chat.ask("Plan it")
    day, time, comment = await store.pending_questions(chat.id)
    assert await store.answer(day.id, "Mon") and await store.answer(time.id, "9:00") and await store.answer(comment.id)
    await chat.complete()
    assert sorted(json.dumps(message.result()) for message in chat.messages if message.role == "tool") == [
        '[{"day": "Mon"}, {"time": "9:00"}]',
        "{}",
    ]
