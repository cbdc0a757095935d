"""Approving with changed arguments on a real database: checked against the tool's schema, run once as changed,
told to the model, kept on the trail; votes bound to the arguments they approved. SQLite file and PostgreSQL."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy import update

from tarry import Approval, Message, ToolCall
from tarry.edits import arguments_digest
from tarry.errors import InvalidAnswerError, NotAllowedError
from tarry.grants import Allow
from tarry.principals import Principal
from tarry.store import Store
from tarry.store.tables import questions
from tarry.testing import ScriptedModel
from tests.store.approvers import Payout
from tests.store.test_accountable import PAY, check_trail, payout_question
from tests.store.test_processes import finish, marker_lines, start
from tests.store.tools import LockedTransfer, TransferMoney, reactive_model

SEND = [{"name": "transfer_money", "arguments": {"to": "Bob", "amount": 500}}]


async def waiting_transfer(store: Store, calls: list[dict[str, object]] = SEND) -> tuple[str, str]:
    chat = await store.create_chat(reactive_model(calls), [TransferMoney(), LockedTransfer()])
    await chat.ask("Send Bob 500")
    [question] = await store.pending_questions(chat.id)
    return chat.id, question.id


@pytest.fixture
def markers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The file the tools of ``tests.store.tools`` mark each run in."""
    path = tmp_path / "markers"
    monkeypatch.setenv("TARRY_TEST_MARKERS", str(path))
    return path


async def test_an_approval_with_changed_arguments_runs_the_call_as_changed_and_tells_the_model(
    store: Store, markers: Path
) -> None:
    chat_id, question_id = await waiting_transfer(store)
    [question] = await store.pending_questions(chat_id)
    assert question.editable is not None and set(question.editable["properties"]) == {"amount", "to"}
    assert question.proposal == {"to": "Bob", "amount": 500}

    assert await store.approve(question_id, arguments={"amount": 50}, by="ann", channel="web") is True
    decided = await store.question(question_id)
    assert decided.answer == {"arguments": {"to": "Bob", "amount": 50}}
    assert decided.proposal == {"to": "Bob", "amount": 50}

    seen: list[list[Message]] = []

    def turn(messages: list[Message]) -> object:
        seen.append(list(messages))
        return "Done."

    chat = await store.load_chat(chat_id, ScriptedModel([turn]), [TransferMoney()])
    await chat.complete()
    assert marker_lines(markers, "transfer") == ["Bob:50"]
    result = chat.messages[-2]
    assert result.role == "tool"
    assert result.content == (
        'A person changed the arguments of this transfer_money call before approving it: from {"amount": 500, '
        '"to": "Bob"} to {"amount": 50, "to": "Bob"}. It ran with the changed arguments.\n\nSent 50 to Bob'
    )
    [shown] = seen
    assert shown[-2].tool_calls[0].arguments == {"to": "Bob", "amount": 50}, "the model sees the call as it ran"

    loaded = await store.load_chat(chat_id, ScriptedModel(["never"]), [TransferMoney()])
    assert loaded.messages[-2].content == result.content
    [event] = await store.history(question_id=question_id)
    assert event.outcome == "decided" and event.arguments == {"to": "Bob", "amount": 500}
    assert event.answer == {"arguments": {"to": "Bob", "amount": 50}}, "the trail keeps both"
    await check_trail(store)


async def test_changed_arguments_are_checked_per_parameter_and_nothing_is_recorded(store: Store) -> None:
    _, question_id = await waiting_transfer(store)
    with pytest.raises(InvalidAnswerError) as caught:
        await store.approve(question_id, arguments={"amount": "lots", "colour": "red"})
    assert set(caught.value.errors) == {"amount", "colour"}
    assert "is not of type 'integer'" in caught.value.errors["amount"]
    assert caught.value.errors["colour"] == "the transfer_money tool does not let a person change colour"
    assert (await store.question(question_id)).decision is None
    assert await store.history(question_id=question_id) == []
    with pytest.raises(ValueError, match="A decline takes no answer or arguments"):
        await store.decide(question_id, "decline", arguments={"amount": 1})


async def test_a_tool_may_forbid_changes_or_allow_some_parameters(store: Store) -> None:
    _, locked = await waiting_transfer(store, [{"name": "locked_transfer", "arguments": {"to": "Bob", "amount": 5}}])
    with pytest.raises(InvalidAnswerError) as caught:
        await store.approve(locked, arguments={"amount": 1})
    assert caught.value.errors == {"arguments": "the locked_transfer tool does not let a person change its arguments"}
    assert (await store.question(locked)).editable is None


async def test_an_unchanged_approval_records_an_empty_answer(store: Store) -> None:
    _, question_id = await waiting_transfer(store)
    assert await store.approve(question_id, arguments={"amount": 500})
    assert (await store.question(question_id)).answer == {}


async def test_a_second_approver_who_changes_the_arguments_does_not_count_the_first_vote(
    finance: Store, markers: Path
) -> None:
    chat_id, question_id = await payout_question(finance)
    assert await finance.approve(question_id, by="ann")
    assert await finance.approve(question_id, arguments={"amount": 90}, by="bob")
    waiting = await finance.question(question_id)
    assert waiting.decision is None, "ann never saw 90: her vote does not count for it"
    assert waiting.proposal == {"to": "Carol", "amount": 90}
    [ann, bob] = waiting.votes
    assert ann.digest == arguments_digest({"to": "Carol", "amount": 900}) and ann.arguments is None
    assert bob.digest == arguments_digest({"to": "Carol", "amount": 90}) and bob.arguments == waiting.proposal
    with pytest.raises(NotAllowedError, match="bob already approved"):
        await finance.approve(question_id, by="bob")

    assert await finance.approve(question_id, by="ann")  # ann approves what bob proposes: the count is reached
    decided = await finance.question(question_id)
    assert decided.decision == "accept" and decided.answer == {"arguments": {"to": "Carol", "amount": 90}}
    chat = await finance.load_chat(chat_id, reactive_model(PAY), [Payout()])
    await chat.complete()
    assert marker_lines(markers, "payout") == ["Carol:90"]
    outcomes = [(event.outcome, event.by.id if event.by else None) for event in await finance.history(chat_id)]
    assert outcomes == [("counted", "ann"), ("counted", "bob"), ("refused", "bob"), ("decided", "ann")]
    await check_trail(finance)


async def test_votes_recorded_before_votes_carried_a_digest_count_for_the_models_arguments(finance: Store) -> None:
    _, question_id = await payout_question(finance)
    assert await finance.approve(question_id, by="ann")
    old = [{"id": "ann", "name": None, "at": "2026-01-01T00:00:00+00:00"}]  # as written before digests
    await finance.db.run_write(
        lambda connection: connection.execute(update(questions).where(questions.c.id == question_id).values(votes=old))
    )
    assert await finance.approve(question_id, by=Principal("bob"))
    assert (await finance.question(question_id)).decision == "accept"


async def test_eight_racing_processes_run_an_edited_call_once(database_url: str, tmp_path: Path) -> None:
    markers = tmp_path / "markers"
    async with Store(database_url) as store:
        await store.setup()
        chat_id, question_id = await waiting_transfer(store)
    go, carry = tmp_path / "go", tmp_path / "carry"
    approvers = [
        start("approve_with", database_url, question_id, str(amount), str(go), markers=markers)
        for amount in range(1, 9)
    ]
    time.sleep(0.5)  # let the processes import and connect; correctness does not depend on it
    go.touch()
    recorded = [json.loads(finish(process))["recorded"] for process in approvers]
    assert recorded.count(True) == 1, "one approval with changes wins"
    winner = recorded.index(True) + 1
    async with Store(database_url) as store:
        decided = await store.question(question_id)
        assert decided.answer == {"arguments": {"to": "Bob", "amount": winner}}
        assert decided.decided_by is not None and decided.decided_by.id == f"p{winner}"
        assert [event.outcome for event in await store.history(question_id=question_id)].count("decided") == 1

    racers = [start("race", database_url, chat_id, str(carry), json.dumps(SEND), markers=markers) for _ in range(8)]
    time.sleep(0.5)
    carry.touch()
    for process in racers:
        finish(process)
    assert Counter(marker_lines(markers, "transfer")) == {f"Bob:{winner}": 1}, "the edited call ran exactly once"
    async with Store(database_url) as store:
        chat = await store.load_chat(chat_id, reactive_model(SEND), [TransferMoney()])
        results = [message for message in chat.messages if message.role == "tool"]
    assert len(results) == 1 and results[0].content.endswith(f"Sent {winner} to Bob")


class GuardedTransfer(TransferMoney):
    """Moves money; over 100 needs two of finance."""

    def requires_approval(self, call: ToolCall) -> Approval:  # type: ignore[override]
        return Approval(count=2, by="finance") if call.arguments["amount"] > 100 else Approval()


async def test_a_changed_call_whose_policy_asks_more_waits_on_a_new_approval(finance: Store, markers: Path) -> None:
    calls = [{"name": "guarded_transfer", "arguments": {"to": "Bob", "amount": 50}}]
    chat = await finance.create_chat(reactive_model(calls), [GuardedTransfer()])
    await chat.ask("Send Bob 50")
    [first] = await finance.pending_questions(chat.id)
    assert first.policy is None
    assert await finance.approve(first.id, arguments={"amount": 5000}, by="ann")

    loaded = await finance.load_chat(chat.id, reactive_model(calls), [GuardedTransfer()])
    await loaded.complete()
    assert loaded.waiting and marker_lines(markers, "transfer") == []
    [again] = await finance.pending_questions(chat.id)
    assert again.id != first.id and again.policy == Approval(count=2, by="finance")
    assert again.proposal == again.changed_arguments == {"to": "Bob", "amount": 5000}
    assert again.message == "Approve the guarded_transfer call as a person changed it?"

    assert await finance.approve(again.id, by="ann")
    assert await finance.approve(again.id, by="bob")
    other = await finance.load_chat(chat.id, reactive_model(calls), [GuardedTransfer()])
    await other.complete()
    assert not other.waiting and marker_lines(markers, "transfer") == ["Bob:5000"]
    assert other.messages[-2].content.endswith("Sent 5000 to Bob")
    await check_trail(finance)


async def test_a_stored_chat_approves_with_changed_arguments_and_carries_the_call_on(
    store: Store, markers: Path
) -> None:
    chat = await store.create_chat(reactive_model(SEND), [TransferMoney()])
    await chat.ask("Send Bob 500")
    [question] = await chat.pending_questions()
    with pytest.raises(InvalidAnswerError) as caught:
        await chat.approve(question, arguments={"amount": -0.5})
    assert caught.value.errors == {"amount": "-0.5 is not of type 'integer'"}
    assert await chat.approve(question, arguments={"to": "Ann"}, by="ann")
    approved = await chat.question(question)
    assert approved.answer == {"arguments": {"to": "Ann", "amount": 500}} and question.answer is None
    assert (await chat.complete()).content == "All done."
    assert marker_lines(markers, "transfer") == ["Ann:500"]
    assert (await store.question(question.id)).answer == approved.answer


async def test_an_approval_with_changed_arguments_may_make_a_grant_in_the_same_decision(
    store: Store, markers: Path
) -> None:
    chat = await store.create_chat(reactive_model(SEND), [TransferMoney()])
    await chat.ask("Send Bob 500")
    [question] = await chat.pending_questions()
    allow = Allow("chat", within={"amount": (0, 1000)}, ttl=3600)
    assert await store.approve(question.id, arguments={"amount": 50}, by="ops-ada", allow=allow)
    (grant,) = await store.grants()
    assert (grant.tool, grant.chat_id, grant.question_id) == ("transfer_money", chat.id, question.id)
    assert (await store.question(question.id)).answer == {"arguments": {"to": "Bob", "amount": 50}}
    await chat.complete()
    assert marker_lines(markers, "transfer") == ["Bob:50"], "the approved call ran as changed"
    await chat.ask("Again")  # the model's own arguments this time, within the grant's bounds: approved at once
    assert not chat.waiting and marker_lines(markers, "transfer") == ["Bob:50", "Bob:500"]


async def test_a_response_is_its_own_decision_and_takes_no_changed_arguments(store: Store) -> None:
    _, question_id = await waiting_transfer(store)
    with pytest.raises(ValueError, match="A response takes no arguments"):
        await store.decide(question_id, "respond", {"sent": True}, arguments={"amount": 5})
    assert (await store.question(question_id)).decision is None


async def test_an_approval_asked_again_of_a_changed_call_takes_a_result_in_the_tools_place(
    finance: Store, markers: Path
) -> None:
    calls = [{"name": "guarded_transfer", "arguments": {"to": "Bob", "amount": 50}}]
    chat = await finance.create_chat(reactive_model(calls), [GuardedTransfer()])
    await chat.ask("Send Bob 50")
    [first] = await finance.pending_questions(chat.id)
    assert await finance.approve(first.id, arguments={"amount": 5000}, by="ann")
    await chat.complete()
    [again] = await finance.pending_questions(chat.id)
    responded = await finance.respond(again.id, "paid by hand", by="ann")
    assert responded is not None and responded.answer == {"result": "paid by hand"}
    await chat.complete()
    assert not chat.waiting and marker_lines(markers, "transfer") == []
    assert "paid by hand" in chat.messages[-2].content
