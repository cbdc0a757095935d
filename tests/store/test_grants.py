"""Standing grants, through the store's public API, on SQLite and PostgreSQL: made in one process, they approve
matching calls in another at once; revoked or expired ones approve nothing; a policy applies to them as to any
decision."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from tarry import Agent, Approval, Principal, Tool
from tarry.clock import utcnow
from tarry.errors import ChatNotFoundError, NotAllowedError, UnknownGrantError
from tarry.grants import Allow, Equal, Within
from tarry.store import Store
from tarry.testing import advance_clock
from tests.store.tools import all_tools, reactive_model

ROOT = Path(__file__).resolve().parents[2]


def transfer(amount: float = 5, to: str = "Bob") -> list[dict[str, object]]:
    return [{"name": "transfer_money", "arguments": {"to": to, "amount": amount}}]


class Payout(Tool):
    """Pays out money; needs two people's approval."""

    requires_approval = Approval(count=2)

    def execute(self, amount: int) -> str:
        return f"Paid {amount}"


class EasyPayout(Payout):
    """Pays out money; two people, or one standing grant."""

    name = "easy_payout"
    requires_approval = Approval(count=2, grant_suffices=True)


class FinancePayout(Payout):
    """Pays out money; only finance approves."""

    name = "finance_payout"
    requires_approval = Approval(by="finance")


def only_finance(principal: Principal, question: object) -> bool:
    return principal.id.startswith("fin-")


async def ask(store: Store, calls: list[dict[str, object]], tools: list[Tool] | None = None, **chat: object):
    """A stored chat that asked once and made ``calls``, as complete() left it."""
    return await store.start_chat("Go", reactive_model(calls), tools if tools is not None else all_tools(), **chat)


async def test_a_grant_made_in_another_process_approves_the_call_at_once(database_url: str) -> None:
    async with Store(database_url) as store:
        await store.setup()
        command = [sys.executable, "-m", "tests.store.proc", "grant", database_url, "transfer_money", "ops-ada"]
        made = await asyncio.to_thread(
            subprocess.run, [*command, "amount=0..10"], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True
        )
        grant_id = made.stdout.strip()
        chat = await ask(store, transfer(5))
        assert not chat.waiting
        assert chat.messages[-1].content == "All done."
        assert "Sent 5 to Bob" in chat.messages[-2].content
        (event,) = await store.history(chat.id)
        assert (event.outcome, event.channel, event.detail) == ("decided", "grant", f"grant {grant_id}")
        assert event.by == Principal("ops-ada")
        question = await store.question(event.question_id)
        assert (question.decision, question.channel, question.decided_by) == ("accept", "grant", Principal("ops-ada"))
        over = await ask(store, transfer(50))
        assert [question.tool_call.name for question in await over.pending_questions()] == ["transfer_money"]
        assert await store.history(over.id) == []


async def test_a_revoked_grant_approves_nothing(store: Store) -> None:
    grant = await store.grant("transfer_money", by="ops-ada")
    revoked = await store.revoke_grant(grant.id, by="ops-bob")
    assert revoked.revoked_by == Principal("ops-bob") and revoked.revoked_at is not None
    assert (await store.revoke_grant(grant.id, by="ops-eve")).revoked_by == Principal("ops-bob")
    assert await store.grants() == []
    assert [listed.id for listed in await store.grants(include_ended=True)] == [grant.id]
    chat = await ask(store, transfer())
    assert len(await chat.pending_questions()) == 1
    assert await store.history(chat.id) == []
    with pytest.raises(UnknownGrantError, match="No grant has the id 'nope'"):
        await store.revoke_grant("nope", by="ops-bob")


async def test_an_expired_grant_approves_nothing(store: Store) -> None:
    await store.grant("transfer_money", by="ops-ada", ttl=60)
    advance_clock(61)
    assert await store.grants() == []
    chat = await ask(store, transfer())
    assert len(await chat.pending_questions()) == 1


async def test_constraints_and_scope_decide_which_calls_a_grant_approves(store: Store) -> None:
    first = await store.create_chat(reactive_model(transfer(5)), all_tools())
    grant = await store.grant(
        "transfer_money", by="ops-ada", chat_id=first.id, equal={"to": "Bob"}, within={"amount": (1, 10)}
    )
    assert grant.constraints == (Equal("to", "Bob"), Within("amount", 1, 10))
    assert grant.scope == f"chat {first.id}"
    await first.ask("Go")
    assert not first.waiting
    elsewhere = await ask(store, transfer(5))  # another chat: outside the grant's scope
    assert len(await elsewhere.pending_questions()) == 1
    for calls in (transfer(5, to="Eve"), transfer(11), transfer(True)):
        chat = await store.create_chat(reactive_model(calls), all_tools())
        await store.grant(
            "transfer_money", by="ops-ada", chat_id=chat.id, equal={"to": "Bob"}, within={"amount": (1, 10)}
        )
        await chat.ask("Go")
        assert len(await chat.pending_questions()) == 1, calls


async def test_an_agent_grant_approves_the_calls_of_that_agents_chats(store: Store) -> None:
    payer = Agent("payer", model=lambda: reactive_model(transfer()), tools=all_tools())
    await store.grant("transfer_money", by="ops-ada", agent="payer")
    chat = await store.start_chat("Go", agent=payer)
    assert not chat.waiting
    other = await ask(store, transfer())
    assert len(await other.pending_questions()) == 1


async def test_a_grant_is_one_approval_of_two(store: Store) -> None:
    await store.grant("payout", by="ops-ada")
    chat = await ask(store, [{"name": "payout", "arguments": {"amount": 3}}], [Payout()])
    (waiting,) = await chat.pending_questions()
    assert [vote.principal for vote in waiting.votes] == [Principal("ops-ada")]
    (event,) = await store.history(chat.id)
    assert (event.outcome, event.channel) == ("counted", "grant")
    with pytest.raises(NotAllowedError, match="already approved"):
        await store.approve(waiting.id, by="ops-ada")
    assert await store.approve(waiting.id, by="ops-bob")
    await chat.complete()
    assert not chat.waiting and chat.messages[-1].content == "All done."


async def test_a_policy_may_let_a_grant_suffice(store: Store) -> None:
    await store.grant("easy_payout", by="ops-ada")
    chat = await ask(store, [{"name": "easy_payout", "arguments": {"amount": 3}}], [EasyPayout()])
    assert not chat.waiting
    assert "Paid 3" in chat.messages[-2].content


async def test_a_grant_by_someone_the_policy_does_not_admit_is_refused(database_url: str) -> None:
    async with Store(database_url, may_decide=only_finance) as store:
        await store.setup()
        await store.grant("finance_payout", by="ops-eve")
        chat = await ask(store, [{"name": "finance_payout", "arguments": {"amount": 3}}], [FinancePayout()])
        (waiting,) = await chat.pending_questions()
        (event,) = await store.history(chat.id)
        assert (event.outcome, event.channel) == ("refused", "grant")
        assert "ops-eve may not decide the finance_payout call" in (event.detail or "")
        with pytest.raises(NotAllowedError, match="ops-eve may not decide"):
            await store.approve(waiting.id, by="ops-eve", allow=Allow("everywhere"))
        assert [grant.granted_by.id for grant in await store.grants()] == ["ops-eve"]  # none made with the refusal
        assert await store.approve(waiting.id, by="fin-ann", allow=Allow("everywhere"))
        again = await ask(store, [{"name": "finance_payout", "arguments": {"amount": 4}}], [FinancePayout()])
        assert not again.waiting


async def test_approving_with_allow_makes_a_grant_in_the_same_decision(store: Store) -> None:
    chat = await store.create_chat(reactive_model(transfer(5)), all_tools())
    await chat.ask("Go")
    (waiting,) = await chat.pending_questions()
    assert await store.approve(waiting.id, by="ops-ada", allow=Allow("chat", within={"amount": (0, 10)}, ttl=3600))
    (grant,) = await store.grants()
    assert (grant.tool, grant.chat_id, grant.question_id) == ("transfer_money", chat.id, waiting.id)
    assert grant.expires_at is not None and grant.expires_at - grant.granted_at == timedelta(hours=1)
    await chat.complete()
    assert not chat.waiting
    await chat.ask("Again")  # the same call in the same chat: the grant approves it
    assert not chat.waiting
    events = await store.history(chat.id)
    assert [(event.channel, event.detail) for event in events] == [("code", None), ("grant", f"grant {grant.id}")]


async def test_a_grant_refused_with_its_decision_leaves_both_unmade(store: Store) -> None:
    chat = await ask(store, transfer())
    (waiting,) = await chat.pending_questions()
    with pytest.raises(ValueError, match="records no agent"):
        await store.approve(waiting.id, by="ops-ada", allow=Allow("agent"))
    with pytest.raises(NotAllowedError, match="self-declared"):
        await store.approve(waiting.id, by=Principal("me", verified=False), allow=Allow())
    assert (await store.question(waiting.id)).decision is None
    assert await store.grants() == [] and await store.history(chat.id) == []


async def test_bad_grants_are_refused_with_what_was_wrong(store: Store) -> None:
    with pytest.raises(ValueError, match="reversed: min 10 > max 1"):
        await store.grant("transfer_money", by="ops-ada", within={"amount": (10, 1)})
    with pytest.raises(ValueError, match="need a min, a max or both"):
        await store.grant("transfer_money", by="ops-ada", within={"amount": (None, None)})
    with pytest.raises(ValueError, match="expires_at is in the past"):
        await store.grant("transfer_money", by="ops-ada", expires_at=utcnow() - timedelta(seconds=1))
    with pytest.raises(ValueError, match="ttl must be a positive number"):
        await store.grant("transfer_money", by="ops-ada", ttl=0)
    with pytest.raises(ValueError, match="one chat or one agent, not both"):
        await store.grant("transfer_money", by="ops-ada", chat_id="c", agent="a")
    with pytest.raises(ValueError, match="needs to know who grants"):
        await store.grant("transfer_money", by=None)  # type: ignore[arg-type]
    with pytest.raises(NotAllowedError, match="self-declared"):
        await store.grant("transfer_money", by=Principal("me", verified=False))
    with pytest.raises(ChatNotFoundError):
        await store.grant("transfer_money", by="ops-ada", chat_id="no-such-chat")
    with pytest.raises(ValueError, match="channel 'grant' is for the decisions standing grants make"):
        await store.approve("any", by="ops-ada", channel="grant")
    assert await store.grants(include_ended=True) == []


def test_the_sync_twins(database_url: str) -> None:
    with Store(database_url) as store:
        store.setup_sync()
        grant = store.grant_sync("transfer_money", by="ops-ada")
        assert [listed.id for listed in store.grants_sync()] == [grant.id]
        assert store.revoke_grant_sync(grant.id, by="ops-ada").revoked_at is not None
