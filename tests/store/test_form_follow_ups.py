"""A tool's question (a form) followed up by its policy on a real database: reminded, escalated, and on timeout
expired (the default) or declined, never answered. The clock is moved, never waited on; other processes sweep."""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from pathlib import Path

import pytest

from tarry.errors import NotAllowedError, QuestionExpiredError
from tarry.principals import Principal
from tarry.store import Store
from tarry.testing import advance_clock
from tests.store.approvers import may_decide
from tests.store.sweepers import ESCALATE, REMIND, TTL, Booking, StrictBooking
from tests.store.test_follow_ups import sweeper
from tests.store.test_processes import finish, marker_lines
from tests.store.tools import reactive_model

ROOT = Path(__file__).resolve().parents[2]
BOOKING = [{"name": "booking", "arguments": {"restaurant": "Roma"}}]
STRICT = [{"name": "strict_booking", "arguments": {"restaurant": "Roma"}}]
BOSS = Principal("boss", "Bea Boss")
ANN = Principal("ann", "Ann Archer")


async def asked(store: Store, calls: list[dict[str, object]] = BOOKING) -> tuple[str, str]:
    """A chat whose booking waits on a person's answer: the chat's id and the question's id."""
    chat = await store.create_chat(reactive_model(calls), [Booking(), StrictBooking()])
    await chat.ask("Book Roma")
    [question] = await store.pending_questions(chat.id)
    assert question.kind == "form" and question.policy is not None
    return chat.id, question.id


async def carried_on(store: Store, chat_id: str, calls: list[dict[str, object]]) -> str:
    """The result the model was given for the chat's call, once the chat is carried on."""
    chat = await store.load_chat(chat_id, reactive_model(calls), [Booking(), StrictBooking()])
    assert (await chat.complete()).content == "All done."
    result = chat.messages[2].content
    assert isinstance(result, str)
    return result


async def test_a_form_is_reminded_escalated_then_answered_by_the_escalated_principal(
    finance: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    markers = tmp_path / "markers"
    monkeypatch.setenv("TARRY_TEST_MARKERS", str(markers))
    chat_id, question_id = await asked(finance)
    assert await finance.sweep_reminders() == []

    advance_clock(REMIND + 1)
    [reminded] = await finance.sweep_reminders()
    assert (reminded.what, reminded.question.id) == ("remind", question_id)
    with pytest.raises(NotAllowedError, match="needs 'finance'"):
        await finance.answer(question_id, "19:00", by=BOSS)

    advance_clock(ESCALATE - REMIND)
    [escalated] = await finance.sweep_reminders()
    assert escalated.what == "escalate" and escalated.question.escalated_to == ("boss",)
    assert await finance.answer(question_id, "19:00", by=BOSS) is True

    question = await finance.question(question_id)
    assert (question.decision, question.answer, question.decided_by) == ("accept", {"time": "19:00"}, BOSS)
    data = question.to_dict()
    assert data["reminded_at"] == reminded.at.isoformat() and data["escalated_to"] == ["boss"]
    events = await finance.history(chat_id)
    assert [(event.decision, event.outcome, event.channel) for event in events] == [
        ("remind", "reminded", "policy"),
        ("accept", "refused", "code"),
        ("escalate", "escalated", "policy"),
        ("accept", "decided", "code"),
    ]
    assert events[2].detail == "escalated to boss"
    assert await finance.sweep_reminders() == []
    assert await carried_on(finance, chat_id, BOOKING) == "Booked Roma at 19:00"
    assert marker_lines(markers, "booking") == ["Roma:19:00"]
    assert await finance.verify_trail() is None


async def test_by_default_a_form_nobody_answered_in_time_expires(finance: Store) -> None:
    chat_id, question_id = await asked(finance)
    advance_clock(TTL + 1)
    assert await finance.sweep_reminders() == []  # too late to remind or escalate, and expiry records nothing
    question = await finance.question(question_id)
    assert (question.decision, question.reminded_at, question.escalated_at) == (None, None, None)
    with pytest.raises(QuestionExpiredError):
        await finance.answer(question_id, "19:00", by=ANN)
    assert "Nobody answered the question of the booking call in time; it lapsed." in await carried_on(
        finance, chat_id, BOOKING
    )


async def test_on_timeout_decline_declines_a_form_and_invents_no_answer(
    finance: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    markers = tmp_path / "markers"
    monkeypatch.setenv("TARRY_TEST_MARKERS", str(markers))
    chat_id, question_id = await asked(finance, STRICT)
    advance_clock(TTL + 1)
    [declined] = await finance.sweep_reminders()
    assert await finance.sweep_reminders() == []

    question = await finance.question(question_id)
    assert declined.what == "decline"
    assert (question.decision, question.answer, question.channel, question.decided_by) == (
        "decline",
        None,
        "policy",
        None,
    )
    decided = [event for event in await finance.history(chat_id) if event.outcome == "decided"]
    assert [(event.decision, event.channel, event.note) for event in decided] == [
        ("decline", "policy", "Nobody decided in time.")
    ]
    result = await carried_on(finance, chat_id, STRICT)
    assert "Nobody answered the question of the strict_booking call in time; its policy declined it." in result
    assert marker_lines(markers, "booking") == []  # the tool was never resumed with an answer


async def test_processes_with_a_moved_clock_remind_each_form_once_then_decline_it(
    database_url: str, tmp_path: Path
) -> None:
    async with Store(database_url, may_decide=may_decide) as store:
        await store.setup()
        asked_forms = [await asked(store, STRICT) for _ in range(12)]
    ids = [question_id for _, question_id in asked_forms]
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}

    def sweepers(seconds: float, start_file: Path, count: int) -> list[str]:
        command = [sys.executable, "-m", "tests.store.sweepers", database_url, str(seconds), str(start_file)]
        started = [sweeper(command, env) for _ in range(count)]
        start_file.touch()
        return [question_id for process in started for question_id in json.loads(finish(process))]

    reminded = Counter(sweepers(REMIND + 1, tmp_path / "remind", 2))
    assert set(reminded) == set(ids) and set(reminded.values()) == {1}
    assert sweepers(TTL + 1, tmp_path / "decline", 2) == []  # none is reminded again

    advance_clock(TTL + 1)
    async with Store(database_url) as store:
        for question_id in ids:
            question = await store.question(question_id)
            assert (question.decision, question.channel, question.answer) == ("decline", "policy", None)
        events = Counter((event.decision, event.outcome) for event in await store.history())
        assert events[("remind", "reminded")] == 12 and events[("decline", "decided")] == 12
        assert await store.verify_trail() is None
        chat_id = asked_forms[0][0]
        assert "its policy declined it" in await carried_on(store, chat_id, STRICT)


async def test_a_forms_reminder_and_escalation_each_write_one_notice(finance: Store) -> None:
    from tests.notify.test_outbox import notices_of

    _, question_id = await asked(finance)
    advance_clock(ESCALATE + 1)
    assert [item.what for item in await finance.sweep_reminders()] == ["remind", "escalate"]
    mine = {event for question, event in await notices_of(finance) if question == question_id}
    assert mine == {"asked", "reminded", "escalated"}
