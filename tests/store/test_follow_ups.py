"""An approval policy's follow-ups on a real database: a reminder, an escalation and a default on timeout.

Each is recorded once (also with several processes sweeping the same database), on the question, on the trail
(channel ``policy``) and in the question's JSON; the clock is moved, never waited on.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from tarry.errors import NotAllowedError, QuestionExpiredError
from tarry.jobs import Worker
from tarry.principals import Principal
from tarry.store import Store
from tarry.testing import advance_clock
from tests.store.approvers import may_decide
from tests.store.sweepers import ESCALATE, REMIND, TTL, Refund, StrictRefund, refunds
from tests.store.test_processes import finish, marker_lines
from tests.store.tools import reactive_model

ROOT = Path(__file__).resolve().parents[2]
REFUND = [{"name": "refund", "arguments": {"to": "Carol", "amount": 40}}]
STRICT = [{"name": "strict_refund", "arguments": {"to": "Carol", "amount": 40}}]
BOSS = Principal("boss", "Bea Boss")


async def asked(store: Store, calls: list[dict[str, object]] = REFUND) -> tuple[str, str]:
    """A chat whose refund waits on its approval: the chat's id and the approval's id."""
    chat = await store.create_chat(reactive_model(calls), [Refund(), StrictRefund()])
    await chat.ask("Refund Carol")
    [question] = await store.pending_questions(chat.id)
    return chat.id, question.id


async def test_a_reminder_is_recorded_once_after_its_time(finance: Store) -> None:
    chat_id, question_id = await asked(finance)
    assert await finance.sweep_reminders() == []

    advance_clock(REMIND + 1)
    [reminded] = await finance.sweep_reminders()
    assert await finance.sweep_reminders() == []

    assert (reminded.what, reminded.question.id) == ("remind", question_id)
    question = await finance.question(question_id)
    assert question.reminded_at == reminded.at and question.escalated_at is None and question.decision is None
    data = question.to_dict()
    assert data["reminded_at"] == reminded.at.isoformat()
    assert (data["escalated_at"], data["escalated_to"]) == (None, [])
    [event] = await finance.history(chat_id)
    assert (event.decision, event.outcome, event.channel, event.by) == ("remind", "reminded", "policy", None)
    assert event.at == reminded.at
    assert await finance.verify_trail() is None


async def test_escalation_admits_the_escalated_principal_only_after_it(
    finance: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    markers = tmp_path / "markers"
    monkeypatch.setenv("TARRY_TEST_MARKERS", str(markers))
    chat_id, question_id = await asked(finance)
    advance_clock(REMIND + 1)
    assert [item.what for item in await finance.sweep_reminders()] == ["remind"]
    with pytest.raises(NotAllowedError, match="needs 'finance'"):
        await finance.approve(question_id, by=BOSS)

    advance_clock(ESCALATE - REMIND)
    [escalated] = await finance.sweep_reminders()
    assert escalated.what == "escalate" and escalated.question.escalated_to == ("boss",)
    with pytest.raises(NotAllowedError):  # a self-declared "boss" is not the boss
        await finance.approve(question_id, by=Principal("boss", verified=False))
    assert await finance.approve(question_id, by=BOSS) is True

    question = await finance.question(question_id)
    assert (question.decision, question.decided_by, question.channel) == ("accept", BOSS, "code")
    assert question.to_dict()["escalated_to"] == ["boss"]
    events = await finance.history(chat_id)
    assert [(event.decision, event.outcome) for event in events] == [
        ("remind", "reminded"),
        ("accept", "refused"),
        ("escalate", "escalated"),
        ("accept", "refused"),
        ("accept", "decided"),
    ]
    assert events[2].detail == "escalated to boss"
    assert await finance.sweep_reminders() == []  # decided: nothing is left to follow up

    chat = await finance.load_chat(chat_id, reactive_model(REFUND), [Refund(), StrictRefund()])
    assert (await chat.complete()).content == "All done."
    assert marker_lines(markers, "refund") == ["Carol:40"]


async def test_by_default_a_timeout_expires_the_approval(finance: Store) -> None:
    chat_id, question_id = await asked(finance)
    advance_clock(TTL + 1)
    assert [item.what for item in await finance.sweep_reminders()] == []  # too late to remind or escalate
    question = await finance.question(question_id)
    assert (question.decision, question.reminded_at, question.escalated_at) == (None, None, None)
    with pytest.raises(QuestionExpiredError):
        await finance.approve(question_id, by=Principal("ann"))

    chat = await finance.load_chat(chat_id, reactive_model(REFUND), [Refund(), StrictRefund()])
    assert (await chat.complete()).content == "All done."
    assert "Nobody approved the refund call in time" in chat.messages[2].content


async def test_on_timeout_decline_records_a_decline_by_the_policy(finance: Store) -> None:
    chat_id, question_id = await asked(finance, STRICT)
    advance_clock(REMIND + 1)
    assert [item.what for item in await finance.sweep_reminders()] == ["remind"]
    advance_clock(TTL)
    [declined] = await finance.sweep_reminders()
    assert await finance.sweep_reminders() == []

    question = await finance.question(question_id)
    assert declined.what == "decline" and declined.question.decision == "decline"
    assert (question.decision, question.channel, question.decided_by) == ("decline", "policy", None)
    assert question.note == "Nobody decided in time."
    decided = [event for event in await finance.history(chat_id) if event.outcome == "decided"]
    assert [(event.decision, event.channel, event.note) for event in decided] == [
        ("decline", "policy", "Nobody decided in time.")
    ]

    chat = await finance.load_chat(chat_id, reactive_model(STRICT), [Refund(), StrictRefund()])
    assert (await chat.complete()).content == "All done."
    result = chat.messages[2].content
    assert "Nobody decided on the strict_refund call in time; its policy declined it." in result
    assert "Nobody decided in time." in result


async def test_a_worker_sweeps_and_carries_a_declined_chat_on(database_url: str) -> None:
    async with Store(database_url, may_decide=may_decide) as store:
        await store.setup()
        chat = await store.create_chat(agent=refunds())
        await chat.ask("Refund Carol")
        [question] = await store.pending_questions(chat.id)
        chat_id, question_id = chat.id, question.id
        advance_clock(TTL + 1)
        worker = Worker(store, [refunds()], poll_interval=0.05)
        running = asyncio.create_task(worker.run())
        try:
            deadline = time.monotonic() + 30
            while (await store.chat_summary(chat_id)).waiting:
                assert time.monotonic() < deadline, "the worker never carried the declined chat on"
                await asyncio.sleep(0.05)
        finally:
            worker.stop()
            await running
        assert (await store.question(question_id)).channel == "policy"
        messages = await store.messages(chat_id)
        assert "its policy declined it" in messages[2].content and messages[-1].content == "All done."


async def test_two_processes_sweeping_one_database_remind_each_question_once(database_url: str, tmp_path: Path) -> None:
    async with Store(database_url, may_decide=may_decide) as store:
        await store.setup()
        ids = [(await asked(store))[1] for _ in range(24)]
    start_file = tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    command = [sys.executable, "-m", "tests.store.sweepers", database_url, str(REMIND + 1), str(start_file)]
    sweepers = [sweeper(command, env) for _ in range(2)]
    start_file.touch()
    reminded = Counter(question_id for process in sweepers for question_id in json.loads(finish(process)))

    assert set(reminded) == set(ids) and set(reminded.values()) == {1}
    async with Store(database_url) as store:
        events = [event for event in await store.history() if event.outcome == "reminded"]
        assert Counter(event.question_id for event in events) == Counter(ids)
        assert await store.verify_trail() is None


def sweeper(command: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    """A sweeping process (``tests.store.sweepers``), started."""
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


async def test_a_reminder_and_an_escalation_each_write_one_notice_with_the_change(finance: Store) -> None:
    from tests.notify.test_outbox import notices_of

    _, question_id = await asked(finance)
    advance_clock(REMIND + 1)
    await finance.sweep_reminders()
    assert await finance.sweep_reminders() == []
    advance_clock(ESCALATE - REMIND)
    await finance.sweep_reminders()

    mine = {event for question, event in await notices_of(finance) if question == question_id}
    assert mine == {"asked", "reminded", "escalated"}
