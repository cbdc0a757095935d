"""``tarry approve ID --set NAME=VALUE``: approving a call with changed arguments from a shell, and what
``tarry pending`` shows of them. Real processes, on a SQLite file and on PostgreSQL."""

from __future__ import annotations

import asyncio

from tarry.cli.exits import Exit
from tarry.edits import arguments_digest
from tarry.store import Store
from tarry.testing import ScriptedModel
from tests.cli.chat_agent import agent, turn
from tests.cli.conftest import tarry


async def test_approve_with_set_changes_the_arguments_and_pending_shows_what_may_change(
    store: Store, database_url: str
) -> None:
    chat = await store.create_chat(agent=agent)
    await chat.ask("pay Bob")
    [approval] = await chat.pending_questions()
    listed = await asyncio.to_thread(tarry, "pending", "--url", database_url)
    assert "may change: amount, to (approve with --set NAME=VALUE)" in listed.stdout

    wrong = await asyncio.to_thread(
        tarry, "approve", approval.id, "--set", "amount=lots", "--set", "colour=red", "--url", database_url
    )
    assert wrong.returncode == Exit.INVALID, wrong.stderr
    assert "amount: 'lots' is not of type 'integer'" in wrong.stderr
    assert "colour: the transfer_money tool does not let a person change colour" in wrong.stderr
    assert (await store.question(approval.id)).decision is None

    done = await asyncio.to_thread(
        tarry, "approve", approval.id, "--set", "amount=15", "--set", "to=Ann Lee", "--url", database_url
    )
    assert done.returncode == Exit.OK, done.stderr
    assert "Recorded: approved with amount=15 (was 20), to='Ann Lee' (was 'Bob')" in done.stdout
    decided = await store.question(approval.id)
    assert decided.answer == {"arguments": {"amount": 15, "to": "Ann Lee"}}
    loaded = await store.load_chat(chat.id, ScriptedModel([turn]), agent.tools)
    await loaded.complete()
    assert loaded.messages[-2].content.endswith("Sent 15 EUR to Ann Lee.")


def test_set_needs_a_name_and_one_question() -> None:
    bad = tarry("approve", "some-id", "--set", "amount")
    assert bad.returncode == Exit.USAGE and "--set takes NAME=VALUE, got 'amount'" in bad.stderr
    whole = tarry("approve", "--chat", "c1", "--all", "--set", "amount=1")
    assert whole.returncode == Exit.USAGE and "--set changes one call's arguments" in whole.stderr


async def test_approve_with_seen_refuses_arguments_changed_since_pending_printed_them(
    store: Store, database_url: str
) -> None:
    chat = await store.create_chat(agent=agent)
    await chat.ask("pay Bob")
    [approval] = await chat.pending_questions()
    listed = await asyncio.to_thread(tarry, "pending", "--url", database_url)
    digest = approval.proposal_digest
    assert digest is not None and f"arguments digest: {digest} (approve with --seen DIGEST)" in listed.stdout
    shown = await asyncio.to_thread(tarry, "show", chat.id, "--url", database_url)
    assert f"arguments digest: {digest}" in shown.stdout
    as_json = await asyncio.to_thread(tarry, "pending", "--json", "--url", database_url)
    assert f'"proposal_digest": "{digest}"' in as_json.stdout

    other = arguments_digest({"amount": 5, "to": "Bob"})  # what a listing printed before someone changed the call
    stale = await asyncio.to_thread(tarry, "approve", approval.id, "--seen", other, "--url", database_url)
    assert stale.returncode == Exit.CHANGED, stale.stderr
    assert "changed since you saw them" in stale.stderr and '"amount": 20' in stale.stderr
    assert (await store.question(approval.id)).decision is None
    [event] = await store.history(question_id=approval.id)
    assert event.outcome == "refused" and event.channel == "cli"

    done = await asyncio.to_thread(tarry, "approve", approval.id, "--seen", digest, "--url", database_url)
    assert done.returncode == Exit.OK, done.stderr
    assert (await store.question(approval.id)).decision == "accept"


def test_seen_takes_a_digest_of_one_question() -> None:
    bad = tarry("approve", "some-id", "--seen", "abc")
    assert bad.returncode == Exit.USAGE and "--seen: seen is a proposal's digest" in bad.stderr
    twice = tarry("approve", "some-id", "--seen", "a" * 64, "--seen", "b" * 64)
    assert twice.returncode == Exit.USAGE and "--seen is one question's digest: give it once" in twice.stderr
    whole = tarry("approve", "--chat", "c1", "--all", "--seen", "a" * 64)
    assert whole.returncode == Exit.USAGE and "--all takes QUESTION_ID=DIGEST, got 'aaaa" in whole.stderr
    bad_pair = tarry("approve", "--chat", "c1", "--all", "--seen", "q1=abc")
    assert bad_pair.returncode == Exit.USAGE and "--seen: seen is a proposal's digest" in bad_pair.stderr
    responded = tarry("respond", "some-id", "paid", "--seen", "abc")
    assert responded.returncode == Exit.USAGE and "--seen: seen is a proposal's digest" in responded.stderr


async def test_respond_with_seen_refuses_arguments_changed_since_pending_printed_them(
    store: Store, database_url: str
) -> None:
    chat = await store.create_chat(agent=agent)
    await chat.ask("pay Bob")
    [approval] = await chat.pending_questions()
    other = arguments_digest({"amount": 5, "to": "Bob"})
    stale = await asyncio.to_thread(
        tarry, "respond", approval.id, "paid by hand", "--seen", other, "--url", database_url
    )
    assert stale.returncode == Exit.CHANGED, stale.stderr
    assert "changed since you saw them" in stale.stderr and '"amount": 20' in stale.stderr
    assert (await store.question(approval.id)).decision is None
    [event] = await store.history(question_id=approval.id)
    assert (event.outcome, event.decision, event.channel) == ("refused", "respond", "cli")

    digest = approval.proposal_digest
    assert digest is not None
    done = await asyncio.to_thread(
        tarry, "respond", approval.id, "paid by hand", "--seen", digest, "--url", database_url
    )
    assert done.returncode == Exit.OK, done.stderr
    decided = await store.question(approval.id)
    assert (decided.decision, decided.answer) == ("respond", {"result": "paid by hand"})
