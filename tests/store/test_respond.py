"""Answering in the tool's place (``respond``): a person gives a call's result, the tool never runs, and the model
reads the result as a person's; on SQLite and PostgreSQL, through the chat, the store, and racing processes."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tarry import Chat, Question, Task, Tool
from tarry.errors import InvalidAnswerError, NotAllowedError, NotRespondableError
from tarry.principals import Principal
from tarry.store import Store
from tarry.testing import ScriptedModel
from tests.store.test_accountable import payout_question
from tests.store.test_processes import finish, marker_lines, start
from tests.store.test_store import park
from tests.store.tools import all_tools, reactive_model

TRANSFER = [{"name": "transfer_money", "arguments": {"to": "Bob", "amount": 5}}]


@pytest.fixture
def markers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The file each run of a test tool writes a line to (``tests.store.tools.mark``)."""
    path = tmp_path / "markers"
    monkeypatch.setenv("TARRY_TEST_MARKERS", str(path))
    return path


async def waiting_transfer(store: Store) -> tuple[Chat, ScriptedModel, Question]:
    """A new chat whose transfer to Bob waits on its approval: the chat, its model and the approval."""
    model = reactive_model(TRANSFER)
    chat = await store.create_chat(model, all_tools())
    await chat.ask("Pay Bob 5")
    [approval] = await chat.pending_questions()
    return chat, model, approval


def given_result(content: str) -> dict[str, object]:
    """A tool message's content, read as the result a person gave."""
    result = json.loads(content)
    assert isinstance(result, dict)
    return result


async def test_a_result_given_by_id_closes_the_call_and_the_model_reads_it_as_a_persons(
    store: Store, markers: Path
) -> None:
    chat, model, approval = await waiting_transfer(store)

    responded = await store.respond(approval.id, {"sent": False, "why": "paid by hand"}, by="ann", channel="web")
    assert responded is not None
    assert (responded.decision, responded.answer) == ("respond", {"result": {"sent": False, "why": "paid by hand"}})
    assert (await store.question(approval.id)).to_dict()["decision"] == "respond"
    assert await store.pending_questions(chat.id) == []

    loaded = await store.load_chat(chat.id, model, all_tools())
    reply = await loaded.complete()
    assert reply is not None and reply.content == "All done."
    assert marker_lines(markers, "transfer") == [], "the tool ran although a person gave its result"
    result = model.requests[-1].messages[-1]
    assert result.role == "tool" and result.tool_call_id == approval.tool_call.id  # type: ignore[union-attr]
    assert given_result(result.content) == {
        "given_by": "a person",
        "message": "A person gave this result in place of running the transfer_money tool; the tool did not run.",
        "result": {"sent": False, "why": "paid by hand"},
    }
    [event] = await store.history(chat.id)
    assert (event.decision, event.outcome, event.answer, event.channel) == (
        "respond",
        "decided",
        {"result": {"sent": False, "why": "paid by hand"}},
        "web",
    )


async def test_a_chat_object_responds_with_text_and_carries_on_without_running_the_tool(
    store: Store, markers: Path
) -> None:
    chat, _model, approval = await waiting_transfer(store)
    assert await chat.respond(approval, "Sent 5 to Bob yesterday", by=Principal("ann", "Ann")) is True
    approval = await chat.question(approval)  # a value: the chat holds the decided one
    assert (approval.decision, approval.answer) == ("respond", {"result": "Sent 5 to Bob yesterday"})
    assert await chat.respond(approval, "twice") is False
    assert await chat.approve(approval) is False
    reply = await chat.complete()
    assert reply is not None and reply.content == "All done."
    assert marker_lines(markers, "transfer") == []
    assert given_result(chat.messages[-2].content)["result"] == "Sent 5 to Bob yesterday"
    history = await store.history(chat.id)
    assert [(event.decision, event.outcome) for event in history] == [
        ("respond", "decided"),
        ("respond", "lost"),
        ("accept", "lost"),
    ]


async def test_a_result_after_another_decision_changes_nothing(store: Store, markers: Path) -> None:
    chat_id = await park(store)
    approval, _colour = await store.pending_questions(chat_id)
    assert await store.decline(approval.id, "no") is True
    assert await store.respond(approval.id, "given") is None
    assert (await store.question(approval.id)).decision == "decline"
    assert [(event.decision, event.outcome) for event in await store.history(chat_id)] == [
        ("decline", "decided"),
        ("respond", "lost"),
    ]


async def test_a_result_for_anything_but_a_calls_approval_is_refused_and_nothing_is_recorded(store: Store) -> None:
    chat_id = await park(store)
    approval, colour = await store.pending_questions(chat_id)
    with pytest.raises(NotRespondableError, match="form question of the pick_colour call: answer it"):
        await store.respond(colour.id, "red")
    chat = await store.load_chat(chat_id, reactive_model([]), all_tools())
    with pytest.raises(NotRespondableError, match="Only the approval a call waits on"):
        await chat.respond(colour.id, "red")
    assert await store.answer(colour.id, {"colour": "red"}) is True
    with pytest.raises(NotRespondableError):  # whatever its state: it never takes a result
        await store.respond(colour.id, "red")
    assert [question.id for question in await store.pending_questions(chat_id)] == [approval.id]
    assert [(event.question_id, event.decision) for event in await store.history(chat_id)] == [(colour.id, "accept")]


class Review(Tool):
    """Asks a person to sign off a change (an approval-kind question of its task), after it ran."""

    def execute(self, change: str) -> Task:
        return Task().with_question(Question("", "approval", f"Sign off {change}?"))


async def test_an_approval_a_calls_task_asked_takes_no_result_by_id_or_on_the_chat(store: Store) -> None:
    chat = await store.create_chat(ScriptedModel([[{"name": "review", "arguments": {"change": "#7"}}]]), [Review()])
    await chat.ask("Review #7")
    [sign_off] = await store.pending_questions(chat.id)
    assert sign_off.kind == "approval"
    with pytest.raises(NotRespondableError, match="asked by the task of the review call, which has run already"):
        await store.respond(sign_off.id, "signed")
    with pytest.raises(NotRespondableError, match="asked by the task of the review call"):
        await chat.respond(sign_off.id, "signed")
    assert (await store.question(sign_off.id)).decision is None
    assert await store.history(chat.id) == []


async def test_a_result_that_is_no_json_value_is_refused_before_anything_is_read(store: Store) -> None:
    chat_id = await park(store)
    approval, _colour = await store.pending_questions(chat_id)
    with pytest.raises(InvalidAnswerError) as invalid:
        await store.respond(approval.id, {1, 2})
    assert set(invalid.value.errors) == {"result"}
    with pytest.raises(InvalidAnswerError, match="NUL"):
        await store.respond(approval.id, {"text": "a\x00b"})
    with pytest.raises(ValueError, match="decline only"):
        await store.decide(approval.id, "respond", "given", note="why")
    assert await store.history(chat_id) == []
    assert await store.respond(approval.id, None) is not None, "JSON's null is a result too"
    assert (await store.question(approval.id)).answer == {"result": None}


async def test_a_result_needs_what_a_decline_needs_of_the_approvals_policy(database_url: str, markers: Path) -> None:
    from tests.store.approvers import may_decide

    async with Store(database_url, may_decide=may_decide) as finance:
        await finance.setup()
        chat_id, question_id = await payout_question(finance)
        with pytest.raises(NotAllowedError, match="self-declared"):
            await finance.respond(question_id, "paid", by=Principal("ann", "Ann", verified=False))
        with pytest.raises(NotAllowedError, match="may not decide"):
            await finance.respond(question_id, "paid", by=Principal("eve", "Eve"))
        responded = await finance.respond(question_id, "paid", by=Principal("ann", "Ann Archer"))
        assert responded is not None and responded.decision == "respond", "one person of finance is enough"
        outcomes = [(event.decision, event.outcome) for event in await finance.history(chat_id)]
        assert outcomes == [("respond", "refused"), ("respond", "refused"), ("respond", "decided")]
        chat = await finance.load_chat(chat_id, reactive_model([]), [])  # no tool needed: none runs
        await chat.complete()
        assert given_result(chat.messages[-2].content)["result"] == "paid"
    assert marker_lines(markers, "payout") == []


async def test_eight_processes_carrying_a_responded_chat_on_never_run_the_tool(
    database_url: str, tmp_path: Path
) -> None:
    markers, go = tmp_path / "markers", tmp_path / "go"
    async with Store(database_url) as store:
        await store.setup()
        chat, _model, approval = await waiting_transfer(store)
        assert await store.respond(approval.id, "Bob was paid in cash") is not None
    racers = [start("race", database_url, chat.id, str(go), json.dumps(TRANSFER), markers=markers) for _ in range(8)]
    time.sleep(0.5)  # let them load the chat; the start file, not this pause, makes them race
    go.touch()
    for process in racers:
        finish(process)
    async with Store(database_url) as store:
        transcript = await store.messages(chat.id)
    assert marker_lines(markers, "transfer") == [], "a process ran the tool"
    assert [message.role for message in transcript] == ["user", "assistant", "tool", "assistant"]
    assert given_result(transcript[2].content)["result"] == "Bob was paid in cash"
    assert marker_lines(markers, "model").count("3") == 1, "the model was asked twice for the turn after the result"
