"""Text a database cannot hold as it is (NUL, lone surrogates): kept faithfully from models and tools, refused
from people, on SQLite and PostgreSQL, through the public API."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tarry import Field, Principal, Task, Tool
from tarry.errors import ChatNotFoundError, InvalidAnswerError, TarryError, UnknownQuestionError
from tarry.store import Store
from tarry.testing import ScriptedModel

MAX_IDENTITY = 200  # tarry.principals.MAX_IDENTITY, written out so that this runs against the code before it too
AWKWARD = ["a NUL \x00 here", "a lone \ud800 surrogate", "\ud83d\ude00 two halves", "\ufdd0 starts marked", "\\x00 é"]
"""Text a model or a tool may send: NUL (PostgreSQL's text refuses it), lone surrogates (UTF-8 has none),
and text that looks like what tarry stores escaped."""


class Echo(Tool):
    """Returns the text it is given."""

    def execute(self, text: str) -> str:
        return text


class Ask(Tool):
    """Asks a question in the words it is given, with a free-text field."""

    def execute(self, words: str) -> Task:
        return self.ask(words, text=Field(required=False))

    def resume(self, task: Task, words: str) -> str:
        return "asked"


def _script(text: str) -> ScriptedModel:
    echo = {"name": "echo", "arguments": {"text": text}}
    return ScriptedModel([[echo], text, [{"name": "ask", "arguments": {"words": text}}], "done"])


@pytest.mark.parametrize("text", AWKWARD)
async def test_what_models_and_tools_send_is_kept_faithfully(store: Store, text: str) -> None:
    chat = await store.create_chat(_script(text), [Echo(), Ask()])
    reply = await chat.ask("Echo it")
    assert reply is not None and reply.content == text  # the model's reply and the tool's result were saved
    await chat.ask("Ask it")  # the chat is not stuck: it goes on
    [asked] = await store.pending_questions(chat.id)
    assert asked.message == text
    assert await store.answer(asked.id, text="fine")
    assert [event.message for event in await store.history(chat.id)] == [text]

    async with Store(store.db.url.render_as_string(hide_password=False)) as elsewhere:
        loaded = await elsewhere.load_chat(chat.id, ScriptedModel(["over"]), [Echo(), Ask()])
        contents = [message.content for message in loaded.messages]
        assert contents == ["Echo it", "", text, text, "Ask it", ""]
        # JSON values are JSON's: two surrogate halves read back as the one character they encode there.
        assert loaded.messages[1].tool_calls[0].arguments == {"text": json.loads(json.dumps(text))}
        assert [message.content for message in await elsewhere.messages(chat.id)] == contents
        assert (await elsewhere.question(asked.id)).message == text
        reply = await loaded.complete()
        assert reply is not None and reply.content == "over"


async def test_what_people_send_that_no_database_can_hold_is_refused_naming_it(store: Store) -> None:
    chat = await store.create_chat(_script("x"), [Echo(), Ask()])
    await chat.ask("Echo it")
    await chat.ask("Ask it")
    [asked] = await store.pending_questions(chat.id)

    for bad, said in (("a\ud800b", "lone surrogate (U+D800)"), ("a\x00b", "NUL")):
        with pytest.raises(InvalidAnswerError) as refused:
            await store.answer(asked.id, text=bad)
        assert said in refused.value.errors["text"]
        with pytest.raises(InvalidAnswerError) as refused:
            await store.decline(asked.id, bad)
        assert said in refused.value.errors["note"]
        for by in (bad, Principal("ann", bad)):
            with pytest.raises(ValueError, match=said.split(" (")[0]):
                await store.decline(asked.id, "no", by=by)
    for by in ("x" * (MAX_IDENTITY + 1), Principal("ann", "y" * (MAX_IDENTITY + 1))):
        with pytest.raises(ValueError, match=f"at most {MAX_IDENTITY} characters"):
            await store.approve(asked.id, by=by)

    # Nothing was recorded, and every read still works; the longest identity the store keeps is taken.
    assert [question.id for question in await store.pending_questions(chat.id)] == [asked.id]
    assert await store.history(chat.id) == []
    assert await store.answer(asked.id, {"text": "fine"}, by=Principal("a" * MAX_IDENTITY, "b" * MAX_IDENTITY))
    [event] = await store.history(chat.id)
    assert event.by == Principal("a" * MAX_IDENTITY, "b" * MAX_IDENTITY)
    decided: dict[str, Any] = (await store.question(asked.id)).to_dict()
    json.dumps([decided, event.to_dict()], ensure_ascii=False).encode()  # what a JSON reader writes out


@pytest.mark.parametrize(
    ("call", "said"),
    [
        ({"name": "n" * 201, "arguments": {}}, "tool name tarry cannot keep (201 characters"),
        ({"name": "ec\x00ho", "arguments": {}}, "tool name tarry cannot keep (NUL characters"),
        ({"id": "c" * 201, "name": "echo", "arguments": {"text": "x"}}, "id tarry cannot keep (201 characters"),
        ({"id": "call\ud800", "name": "echo", "arguments": {"text": "x"}}, "id tarry cannot keep (a lone surrogate"),
    ],
)
async def test_a_tool_call_whose_id_or_name_no_store_keeps_is_refused_and_nothing_is_recorded(
    store: Store, call: dict[str, Any], said: str
) -> None:
    chat = await store.create_chat(ScriptedModel([[call], "over"]), [Echo()])
    with pytest.raises(TarryError, match=re.escape(said)):
        await chat.ask("Call it")
    assert [message.role for message in await store.messages(chat.id)] == ["user"]  # the reply was not recorded
    assert await chat.complete() is not None  # asking the model again goes on
    assert [message.content for message in await store.messages(chat.id)] == ["Call it", "over"]


@pytest.mark.parametrize("wrong", ["\x00", "a\ud800"])
async def test_an_id_no_row_can_hold_is_unknown(store: Store, wrong: str) -> None:
    with pytest.raises(UnknownQuestionError):
        await store.question(wrong)
    with pytest.raises(ChatNotFoundError):
        await store.chat_summary(wrong)
    with pytest.raises(ChatNotFoundError):
        await store.messages(wrong)
    assert list(await store.pending_questions(wrong)) == []
