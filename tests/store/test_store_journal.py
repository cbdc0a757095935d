"""The store's journal on its own: what it asks the database, and when it knows it need not."""

from __future__ import annotations

from typing import Any

from sqlalchemy import event

from tarry import Question
from tarry.calls import Claim
from tarry.changes import Changes
from tarry.messages import Message
from tarry.store import Store
from tarry.store.journal import StoreJournal
from tests.store.test_store import parked_on_transfers, statements_sent


async def looked(journal: StoreJournal, start: int = 0) -> Changes | None:
    """What a look of ``journal`` from message ``start`` on yields (taken in: the block ends without an error)."""
    async with journal.refresh(start) as changes:
        return changes


def approval_of(changes: Changes | None, to: str) -> Question:
    assert changes is not None
    (call,) = [call for call in changes.calls if call.call.arguments["to"] == to]
    (question,) = call.questions
    return question


async def test_a_call_a_decision_claimed_for_a_session_is_the_session_s_until_it_ends(postgres_url: str) -> None:
    async with Store(postgres_url) as store, Store(postgres_url) as other:
        parked, _ = await parked_on_transfers(store, ["Ann"])
        journal, elsewhere = StoreJournal(store, parked.id), StoreJournal(other, parked.id)
        to_ann = approval_of(await looked(journal), "Ann")
        assert to_ann.tool_call is not None
        call_id = to_ann.tool_call.id
        async with journal.session():
            decided = await journal.decide(
                to_ann, "accept", {}, None, None, "code", running=False, closed=False, carry_on=True
            )
            assert decided is not None and decided.decision == "accept"
            await looked(elsewhere)
            async with elsewhere.hold_call(call_id) as claim:
                assert claim is Claim.BUSY, "the decision did not claim the call it freed"
        await looked(elsewhere)
        async with elsewhere.hold_call(call_id) as claim:
            assert claim is Claim.GRANTED, "the session ended without giving back the call it did not use"


async def test_a_decision_outside_a_session_claims_nothing_along(postgres_url: str) -> None:
    async with Store(postgres_url) as store, Store(postgres_url) as other:
        parked, _ = await parked_on_transfers(store, ["Ann"])
        journal, elsewhere = StoreJournal(store, parked.id), StoreJournal(other, parked.id)
        to_ann = approval_of(await looked(journal), "Ann")
        assert to_ann.tool_call is not None
        decided = await journal.decide(
            to_ann, "accept", {}, None, None, "code", running=False, closed=False, carry_on=True
        )
        assert decided is not None
        await looked(elsewhere)
        async with elsewhere.hold_call(to_ann.tool_call.id) as claim:
            assert claim is Claim.GRANTED, "no session owns it, yet the decision kept the call"


async def test_in_a_session_a_look_after_the_journal_s_own_latest_write_asks_nothing(database_url: str) -> None:
    async with Store(database_url) as store:
        await store.setup()
        chat = await store.create_chat()
        journal = StoreJournal(store, chat.id)
        await looked(journal)
        async with journal.session():
            await journal.append(Message("user", "Hello"))
            with statements_sent(store) as inside:
                assert await looked(journal, 0) is None
        with statements_sent(store) as outside:
            assert await looked(journal, 0) is None
    assert inside == [], "the journal asked, though its own write was the latest"
    if not database_url.startswith("sqlite"):  # there the version and the rows are read in one snapshot
        assert outside == ["version"], "outside a session the journal took its write as current"


async def test_a_write_of_another_process_in_between_makes_the_next_look_read(postgres_url: str) -> None:
    async with Store(postgres_url) as store, Store(postgres_url) as other:
        await store.setup()
        chat = await store.create_chat()
        journal, elsewhere = StoreJournal(store, chat.id), StoreJournal(other, chat.id)
        await looked(journal)
        await looked(elsewhere)
        await elsewhere.append(Message("user", "First"))
        async with journal.session():
            await journal.append(Message("assistant", "Hi"))
            with statements_sent(store) as sent:
                changes = await looked(journal, 0)
    assert changes is not None and [message.content for message in changes.messages] == ["First", "Hi"]
    assert sent == ["load"], "the journal did not read what the other process wrote"


async def test_a_claim_on_a_view_the_chat_changed_under_is_stale_and_one_after_a_look_asks_only_for_the_call(
    postgres_url: str,
) -> None:
    async with Store(postgres_url) as store, Store(postgres_url) as other:
        parked, _ = await parked_on_transfers(store, ["Ann", "Bob"])
        journal = StoreJournal(store, parked.id)
        changes = await looked(journal)
        to_ann, to_bob = approval_of(changes, "Ann"), approval_of(changes, "Bob")
        assert to_ann.tool_call is not None
        assert await other.approve(to_bob.id) is True  # the chat changes; Ann's call does not
        claims: list[str] = []

        def note(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
            if statement.startswith("UPDATE tarry_tool_calls SET claimed_by"):
                claims.append(statement)

        event.listen(store.db.sync_engine, "before_cursor_execute", note)
        async with journal.session():
            with statements_sent(store) as stale:
                async with journal.hold_call(to_ann.tool_call.id) as claim:
                    assert claim is Claim.STALE, "the claim did not check the chat's version"
            with statements_sent(store) as after:
                await looked(journal)
                async with journal.hold_call(to_ann.tool_call.id) as claim:
                    assert claim is Claim.GRANTED
        event.remove(store.db.sync_engine, "before_cursor_execute", note)
    assert stale == ["claim", "why not"]
    assert after[:2] == ["load", "claim"], "the journal asked for the version first, or claimed twice"
    assert "EXISTS" in claims[0] and "EXISTS" not in claims[1], "only the claim on the old view checks the chat"
