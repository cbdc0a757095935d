"""``tarry approve --as``, the OS user by default, ``--may-decide`` for policies, and ``tarry history``."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from tarry.cli.exits import Exit
from tarry.cli.identity import os_user
from tarry.principals import Principal
from tarry.store import Store
from tarry.testing import ScriptedModel, advance_clock
from tests.cli import schemas
from tests.cli.conftest import tarry
from tests.cli.policies import finance_or_this_shell
from tests.cli.test_inbox import parked, valid
from tests.store.approvers import Payout
from tests.store.sweepers import REMIND, TTL, StrictBooking, StrictRefund
from tests.store.test_database_errors import on_database

ROOT = Path(__file__).resolve().parents[2]


async def test_decisions_record_the_os_user_or_as_and_history_lists_them(store: Store, database_url: str) -> None:
    first, second = await parked(store, "pay Bob"), await parked(store, "pay Bob")
    [one], [two] = await first.pending_questions(), await second.pending_questions()
    done = await asyncio.to_thread(tarry, "approve", one.id, "--url", database_url)
    assert done.returncode == Exit.OK, done.stderr
    declined = await asyncio.to_thread(tarry, "decline", two.id, "--as", "ann", "--note", "no", "--url", database_url)
    assert declined.returncode == Exit.OK, declined.stderr
    late = await asyncio.to_thread(tarry, "approve", two.id, "--as", "bob", "--url", database_url)
    assert late.returncode == Exit.TOO_LATE
    assert (await store.question(one.id)).decided_by is not None
    assert (await store.question(one.id)).decided_by.id == os_user().id  # type: ignore[union-attr]

    listed = await asyncio.to_thread(tarry, "history", "--url", database_url)
    assert listed.returncode == Exit.OK, listed.stderr
    lines = listed.stdout.splitlines()
    assert len(lines) == 3
    assert f"{os_user().id} via cli: accept decided" in lines[0]
    assert "ann via cli: decline decided" in lines[1] and "transfer_money" in lines[1]
    assert "bob via cli: accept lost (already decided (decline) by ann)" in lines[2]
    as_json = await asyncio.to_thread(tarry, "history", "--json", "--question", two.id, "--url", database_url)
    events = valid(schemas.HISTORY, as_json.stdout)
    assert [(event["outcome"], event["by"]["id"], event["note"]) for event in events] == [
        ("decided", "ann", "no"),
        ("lost", "bob", None),
    ]
    chat_only = await asyncio.to_thread(tarry, "history", "--json", "--chat", first.id, "--url", database_url)
    assert [event["question_id"] for event in valid(schemas.HISTORY, chat_only.stdout)] == [one.id]


async def test_a_two_person_policy_from_the_shell(store: Store, database_url: str) -> None:
    chat = await store.create_chat(
        ScriptedModel([[{"name": "payout", "arguments": {"to": "Carol", "amount": 9}}], "Paid."]), [Payout()]
    )
    await chat.ask("Pay Carol")
    [question] = await chat.pending_questions()
    check = ["--may-decide", "tests.cli.policies:finance_or_this_shell", "--url", database_url]
    unchecked = await asyncio.to_thread(tarry, "approve", question.id, "--url", database_url)
    assert unchecked.returncode == Exit.NOT_ALLOWED
    assert "nothing checks who that is" in unchecked.stderr
    outsider = await asyncio.to_thread(tarry, "approve", question.id, "--as", "mallory", *check, cwd=ROOT)
    assert outsider.returncode == Exit.NOT_ALLOWED
    assert "mallory is a self-declared name that nobody checked" in outsider.stderr
    # A name typed after --as is a claim: even a member of finance's name counts for nothing (this test
    # approved as ann and bob with --as before, and so completed the two-person rule from one shell).
    claimed = await asyncio.to_thread(tarry, "approve", question.id, "--as", "ann", *check, cwd=ROOT)
    assert claimed.returncode == Exit.NOT_ALLOWED
    assert "ann is a self-declared name that nobody checked" in claimed.stderr
    first = await asyncio.to_thread(tarry, "approve", question.id, *check, cwd=ROOT)  # the OS user, verified
    assert first.returncode == Exit.OK, first.stderr
    assert "Recorded: approval 1 of 2 (payout(to='Carol', amount=9)); it waits for more." in first.stdout
    async with Store(database_url, may_decide=finance_or_this_shell) as elsewhere:  # bob, in the app's own code
        assert await elsewhere.approve(question.id, by=Principal("bob", "Bob Baker"), channel="api")
    decided = await store.question(question.id)
    assert decided.decision == "accept" and [vote.principal.id for vote in decided.votes] == [os_user().id, "bob"]
    outcomes = [event.outcome for event in await store.history(question_id=question.id)]
    assert outcomes == ["refused", "refused", "refused", "counted", "decided"]


async def test_respond_gives_the_result_as_text_or_json_and_history_shows_it(store: Store, database_url: str) -> None:
    first, second, booking = await parked(store, "pay Bob"), await parked(store, "pay Bob"), await parked(store, "book")
    [one], [two], [form] = (
        await first.pending_questions(),
        await second.pending_questions(),
        await booking.pending_questions(),
    )
    done = await asyncio.to_thread(tarry, "respond", one.id, "Bob was paid in cash", "--url", database_url)
    assert done.returncode == Exit.OK, done.stderr
    assert "Recorded: gave the result 'Bob was paid in cash' in the tool's place" in done.stdout
    recorded = await store.question(one.id)
    assert (recorded.decision, recorded.answer, recorded.channel) == (
        "respond",
        {"result": "Bob was paid in cash"},
        "cli",
    )
    assert recorded.decided_by is not None and recorded.decided_by.id == os_user().id
    late = await asyncio.to_thread(tarry, "respond", one.id, "again", "--url", database_url)
    assert late.returncode == Exit.TOO_LATE and "gave the result 'Bob was paid in cash'" in late.stderr

    as_json = await asyncio.to_thread(
        tarry, "respond", two.id, '{"paid": 20}', "--json", "--as", "ann", "--url", database_url
    )
    assert as_json.returncode == Exit.OK, as_json.stderr
    assert (await store.question(two.id)).answer == {"result": {"paid": 20}}
    not_json = await asyncio.to_thread(tarry, "respond", form.id, "{nope", "--json", "--url", database_url)
    assert not_json.returncode == Exit.INVALID and "--json needs a JSON value" in not_json.stderr
    refused = await asyncio.to_thread(tarry, "respond", form.id, "8pm", "--url", database_url)
    assert refused.returncode == Exit.INVALID and "form question of the book_table call" in refused.stderr
    assert (await store.question(form.id)).decision is None

    listed = await asyncio.to_thread(tarry, "history", "--url", database_url)
    lines = listed.stdout.splitlines()
    assert len(lines) == 3, "a refused response is not on the trail"
    assert "via cli: respond decided: result='Bob was paid in cash'" in lines[0]
    assert "via cli: respond lost" in lines[1]
    assert "ann via cli: respond decided: result={'paid': 20}" in lines[2]
    events = valid(schemas.HISTORY, (await asyncio.to_thread(tarry, "history", "--json", "--url", database_url)).stdout)
    assert [event["decision"] for event in events] == ["respond"] * 3

    await first.complete()  # the tool never runs: the model reads the given result
    assert first.messages[-1].content.startswith('Done: {"given_by": "a person"')
    assert "Bob was paid in cash" in first.messages[-1].content and "Sent 20 EUR" not in first.messages[-1].content


async def test_history_verify_and_jsonl_show_an_intact_trail_then_a_tampered_one(
    store: Store, database_url: str
) -> None:
    first, second = await parked(store, "pay Bob"), await parked(store, "pay Bob")
    [one], [two] = await first.pending_questions(), await second.pending_questions()
    assert await store.approve(one.id, by="ann") and await store.decline(two.id, "nein 💸", by="bob")
    assert await store.approve(two.id, by="carol") is False

    intact = await asyncio.to_thread(tarry, "history", "--verify", "--url", database_url)
    assert intact.returncode == Exit.OK, intact.stderr
    assert "The audit trail is intact" in intact.stdout
    exported = await asyncio.to_thread(tarry, "history", "--jsonl", "--url", database_url)
    assert exported.returncode == Exit.OK, exported.stderr
    lines = [json.loads(line) for line in exported.stdout.splitlines()]
    events = await store.history()
    assert [(line["id"], line["lane"], line["seq"], line["hash"]) for line in lines] == [
        (e.id, e.lane, e.seq, e.hash) for e in events
    ]
    assert [line["outcome"] for line in lines] == ["decided", "decided", "lost"] and lines[1]["note"] == "nein 💸"
    assert valid(schemas.HISTORY, json.dumps([{k: v for k, v in line.items() if k not in ("lane", "seq", "hash")}
                                               for line in lines]))  # fmt: skip

    def forge(connection: Any) -> None:
        if connection.dialect.name == "postgresql":  # the trail's guard refuses changes; its owner turns it off
            connection.execute(text("ALTER TABLE tarry_decision_events DISABLE TRIGGER tarry_trail_refuse"))
        connection.execute(
            text("UPDATE tarry_decision_events SET by_id = 'mallory' WHERE id = :id"), {"id": lines[0]["id"]}
        )

    await asyncio.to_thread(on_database, database_url, forge)
    broken = await asyncio.to_thread(tarry, "history", "--verify", "--url", database_url)
    assert broken.returncode == Exit.TAMPERED == 10
    assert f"the audit trail was tampered with: changed at event {lines[0]['id']}" in broken.stderr
    both = await asyncio.to_thread(tarry, "history", "--verify", "--json", "--url", database_url)
    assert both.returncode == Exit.USAGE


@pytest.mark.parametrize(
    ("name", "arguments"),
    [("strict_refund", {"to": "Carol", "amount": 9}), ("strict_booking", {"restaurant": "Roma"})],
    ids=["approval", "form"],
)
async def test_history_lists_what_a_question_policy_did_of_itself(
    store: Store, database_url: str, name: str, arguments: dict[str, Any]
) -> None:
    chat = await store.create_chat(
        ScriptedModel([[{"name": name, "arguments": arguments}], "Noted."]), [StrictRefund(), StrictBooking()]
    )
    await chat.ask("Refund Carol")
    advance_clock(REMIND + 1)
    await store.sweep_reminders()
    pending = await asyncio.to_thread(tarry, "pending", "--json", "--url", database_url)
    [reminded] = valid(schemas.PENDING, pending.stdout)
    assert reminded["reminded_at"] is not None and reminded["escalated_to"] == []
    assert reminded["policy"]["on_timeout"] == "decline" and reminded["policy"]["remind_after"] == REMIND
    advance_clock(TTL)
    await store.sweep_reminders()

    listed = await asyncio.to_thread(tarry, "history", "--url", database_url)
    assert listed.returncode == Exit.OK, listed.stderr
    first, second = listed.stdout.splitlines()
    assert f"its policy via policy: reminded  {name}" in first
    assert f"nobody known via policy: decline decided, note 'Nobody decided in time.'  {name}" in second
    as_json = await asyncio.to_thread(tarry, "history", "--json", "--url", database_url)
    events = valid(schemas.HISTORY, as_json.stdout)
    assert [(event["decision"], event["outcome"], event["channel"]) for event in events] == [
        ("remind", "reminded", "policy"),
        ("decline", "decided", "policy"),
    ]
