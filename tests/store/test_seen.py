"""Approvals that say which arguments they saw (``seen``), and grants on approvals asked again of a changed call, on a
real SQLite file and PostgreSQL, through the store's and the chat's public API."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tarry import Approval, Chat, ToolCall
from tarry.edits import arguments_digest
from tarry.errors import NotDecidableError, ProposalChangedError
from tarry.store import Store
from tarry.testing import ScriptedModel
from tests.store.approvers import Payout
from tests.store.test_accountable import PAY, check_trail, payout_question
from tests.store.test_approve_all import PAYOUT, transfer, turn_of
from tests.store.test_processes import marker_lines
from tests.store.tools import TransferMoney, reactive_model

SEND = [{"name": "transfer_money", "arguments": {"to": "Bob", "amount": 500}}]


@pytest.fixture
def markers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The file the tools of ``tests.store.tools`` mark each run in."""
    path = tmp_path / "markers"
    monkeypatch.setenv("TARRY_TEST_MARKERS", str(path))
    return path


async def test_a_stale_approval_is_refused_after_another_person_changed_the_arguments(
    finance: Store, markers: Path
) -> None:
    chat_id, question_id = await payout_question(finance)
    shown = await finance.question(question_id)  # what ann's page shows: the model's arguments
    assert shown.proposal_digest == arguments_digest({"to": "Carol", "amount": 900})
    assert shown.to_dict()["proposal_digest"] == shown.proposal_digest

    assert await finance.approve(question_id, arguments={"amount": 90}, by="bob", seen=shown.proposal_digest)
    with pytest.raises(ProposalChangedError) as caught:
        await finance.approve(question_id, by="ann", seen=shown.proposal_digest)
    changed = {"to": "Carol", "amount": 90}
    assert caught.value.proposal == changed and caught.value.digest == arguments_digest(changed)
    assert "changed since you saw them" in str(caught.value) and '"amount": 90' in str(caught.value)
    waiting = await finance.question(question_id)
    assert waiting.decision is None and [vote.principal.id for vote in waiting.votes] == ["bob"], "nothing recorded"
    refused = (await finance.history(question_id=question_id))[-1]
    assert (refused.outcome, refused.by.id if refused.by else None) == ("refused", "ann")
    assert refused.detail is not None and "changed since you saw them" in refused.detail

    assert await finance.approve(question_id, by="ann", seen=waiting.proposal_digest)  # what she sees now
    decided = await finance.question(question_id)
    assert decided.decision == "accept" and decided.answer == {"arguments": changed}
    chat = await finance.load_chat(chat_id, reactive_model(PAY), [Payout()])
    await chat.complete()
    assert marker_lines(markers, "payout") == ["Carol:90"]
    await check_trail(finance)


async def test_without_seen_an_approval_counts_for_the_arguments_proposed_now(finance: Store) -> None:
    _, question_id = await payout_question(finance)
    assert await finance.approve(question_id, arguments={"amount": 90}, by="bob")
    assert await finance.approve(question_id, by="ann")  # as before: no digest, no check
    assert (await finance.question(question_id)).answer == {"arguments": {"to": "Carol", "amount": 90}}


async def test_a_digest_that_is_not_the_proposals_refuses_a_one_person_approval_on_every_path(store: Store) -> None:
    questions = []
    for _ in range(3):
        chat = await store.create_chat(reactive_model(SEND), [TransferMoney()])
        await chat.ask("Send Bob 500")
        [question] = await store.pending_questions(chat.id)
        questions.append(question)
    right, wrong = questions[0].proposal_digest, arguments_digest({"to": "Eve", "amount": 500})
    # Together: on PostgreSQL these go to the database in one statement of several decisions.
    results = await asyncio.gather(
        store.approve(questions[0].id, seen=right, by="ann"),
        store.approve(questions[1].id, seen=wrong, by="ann"),
        store.approve(questions[2].id, by="ann"),
        return_exceptions=True,
    )
    assert results[0] is True and results[2] is True
    assert isinstance(results[1], ProposalChangedError)
    assert (await store.question(questions[1].id)).decision is None
    [event] = await store.history(question_id=questions[1].id)
    assert event.outcome == "refused"
    # Alone, read first (an answer to check) and through a chat object.
    with pytest.raises(ProposalChangedError):
        await store.decide(questions[1].id, "accept", {}, seen=wrong)
    with pytest.raises(ProposalChangedError):
        await store.decide(questions[1].id, "respond", "paid by hand", seen=wrong)
    with pytest.raises(ProposalChangedError):
        await store.respond(questions[1].id, "paid by hand", seen=wrong)
    chat = await store.load_chat(questions[1].chat_id, reactive_model(SEND), [TransferMoney()])
    with pytest.raises(ProposalChangedError):
        await chat.approve(questions[1].id, seen=wrong)
    assert (await store.question(questions[1].id)).decision is None
    assert await chat.approve(questions[1].id, seen=questions[1].proposal_digest)
    assert (await store.question(questions[1].id)).decision == "accept"


async def test_seen_must_be_a_digest(store: Store) -> None:
    _, question_id = await payout_question(store)
    with pytest.raises(ValueError, match="64 lowercase hexadecimal digits"):
        await store.approve(question_id, seen="abc")
    with pytest.raises(TypeError, match="seen is the digest"):
        await store.approve(question_id, seen=5)  # type: ignore[arg-type]
    assert await store.history(question_id=question_id) == []


async def test_an_in_memory_chat_refuses_a_stale_approval_too() -> None:
    chat = Chat(ScriptedModel([SEND, "All done."]), tools=[TransferMoney()])
    await chat.ask("Send Bob 500")
    [question] = await chat.pending_questions()
    assert question.proposal_digest == arguments_digest({"to": "Bob", "amount": 500})
    with pytest.raises(ProposalChangedError):
        await chat.approve(question, seen=arguments_digest({"to": "Bob", "amount": 5}))
    with pytest.raises(ProposalChangedError):
        await chat.respond(question, "sent by hand", seen=arguments_digest({"to": "Bob", "amount": 5}))
    with pytest.raises(ValueError, match="64 lowercase hexadecimal digits"):
        await chat.respond(question, "sent by hand", seen="abc")
    assert (await chat.question(question)).decision is None
    assert await chat.approve(question, seen=question.proposal_digest)


class GrantableTransfer(TransferMoney):
    """Moves money; over 100 needs two people, or one standing grant."""

    def requires_approval(self, call: ToolCall) -> Approval:  # type: ignore[override]
        return Approval(count=2, grant_suffices=True) if call.arguments["amount"] > 100 else Approval()


async def test_a_grant_matching_the_call_as_changed_decides_the_approval_asked_again(
    store: Store, markers: Path
) -> None:
    calls = [{"name": "grantable_transfer", "arguments": {"to": "Bob", "amount": 50}}]
    grant = await store.grant("grantable_transfer", by="ops-ada", within={"amount": (1000, 10000)})
    chat = await store.create_chat(reactive_model(calls), [GrantableTransfer()])
    await chat.ask("Send Bob 50")
    [first] = await store.pending_questions(chat.id)  # 50 is outside the grant: a person approves
    assert await store.approve(first.id, arguments={"amount": 5000}, by="ann")

    loaded = await store.load_chat(chat.id, reactive_model(calls), [GrantableTransfer()])
    await loaded.complete()  # asked again of the call as changed, which the grant matches: it runs at once
    assert not loaded.waiting and marker_lines(markers, "transfer") == ["Bob:5000"]
    events = await store.history(chat.id)
    assert [(event.outcome, event.channel) for event in events] == [("decided", "code"), ("decided", "grant")]
    again = await store.question(events[1].question_id)
    assert again.id != first.id and again.changed_arguments == {"to": "Bob", "amount": 5000}
    assert events[1].detail == f"grant {grant.id}"
    await check_trail(store)


async def test_a_whole_turn_approved_with_the_digests_shown_is_refused_whole_when_one_changed(finance: Store) -> None:
    chat_id, shown = await turn_of(finance, [transfer("Bob"), PAYOUT])  # what ann's page shows
    seen = {question.id: question.proposal_digest for question in shown}
    payout = next(question for question in shown if question.tool_call and question.tool_call.name == "payout")
    assert await finance.approve(payout.id, arguments={"amount": 90}, by="bob")  # 1 of 2, for 90

    with pytest.raises(NotDecidableError) as caught:
        await finance.approve_all(chat_id, by="ann", seen=seen)
    assert caught.value.question_id == payout.id and isinstance(caught.value.reason, ProposalChangedError)
    assert caught.value.reason.proposal == {"to": "Carol", "amount": 90}
    assert f"question {payout.id} (payout)" in str(caught.value) and "changed since you saw them" in str(caught.value)
    now = [await finance.question(question.id) for question in shown]
    assert [question.decision for question in now] == [None, None], "all or nothing: the transfer is not approved"
    assert [vote.principal.id for vote in (await finance.question(payout.id)).votes] == ["bob"]
    assert [event.by.id if event.by else None for event in await finance.history(chat_id)] == ["bob"]

    again = {question.id: question.proposal_digest for question in now}  # ann looks again: 90
    approved = await finance.approve_all(chat_id, by="ann", seen=again)
    assert sorted(question.id for question in approved) == sorted(seen)
    assert (await finance.question(payout.id)).answer == {"arguments": {"to": "Carol", "amount": 90}}
    await check_trail(finance)


async def test_a_whole_turn_stops_at_a_question_the_approver_was_not_shown(store: Store) -> None:
    chat_id, shown = await turn_of(store, [transfer("Bob"), transfer("Dan")])
    first = shown[0]
    with pytest.raises(NotDecidableError) as caught:
        await store.approve_all(chat_id, by="ann", seen={first.id: first.proposal_digest})
    assert caught.value.question_id == shown[1].id and caught.value.reason is None
    assert "not among the questions you saw" in str(caught.value)
    with pytest.raises(NotDecidableError) as wrong:
        await store.approve_all(chat_id, seen={question.id: arguments_digest({"to": "Eve"}) for question in shown})
    assert wrong.value.question_id == min(q.id for q in shown) and isinstance(wrong.value.reason, ProposalChangedError)
    other_id, [other] = await turn_of(store, [transfer("Eve")])
    with pytest.raises(ValueError, match=f"not chat {chat_id}'s: {other.id}"):
        await store.approve_all(chat_id, seen={question.id: question.proposal_digest for question in [*shown, other]})
    with pytest.raises(TypeError, match="seen maps each question's id"):
        await store.approve_all(chat_id, seen=[first.proposal_digest])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="64 lowercase hexadecimal digits"):
        await store.approve_all(chat_id, seen={first.id: "abc"})
    assert await store.history(chat_id) == [] and await store.history(other_id) == []

    assert await store.approve(first.id, by="bob")  # decided meanwhile: its digest is left out, the rest approved
    approved = await store.approve_all(chat_id, by="ann", seen={q.id: q.proposal_digest for q in shown})
    assert [question.id for question in approved] == [shown[1].id]
