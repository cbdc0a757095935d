"""The inbox commands (pending, answer, approve, decline, chats, show, tasks, cancel) as a script runs them.

Real processes, their exit codes and JSON; every test runs on a SQLite file and on PostgreSQL.
"""

from __future__ import annotations

import asyncio
import getpass
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from sqlalchemy import update

from tarry.chat import Chat
from tarry.cli.exits import Exit, exit_status
from tarry.clock import utcnow
from tarry.errors import ToolCallRunningError
from tarry.store import Store
from tarry.store.tables import tool_calls
from tests.cli import schemas
from tests.cli.chat_agent import TransferMoney, agent
from tests.cli.conftest import start_tarry, tarry


def valid(schema: dict[str, Any], text: str) -> Any:
    """``text`` parsed as JSON, after checking it against ``schema`` (formats included)."""
    value = json.loads(text)
    Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER).validate(value)
    return value


class QuickTransfer(TransferMoney):
    """A transfer whose approval lapses after 0.3 s."""

    name = "transfer_money"
    approval_ttl = 0.3


async def parked(store: Store, text: str) -> Chat:
    """A stored chat of the test agent, parked on what ``text`` asks for."""
    chat = await store.create_chat(agent=agent)
    await chat.ask(text)
    assert chat.waiting
    return chat


async def test_pending_lists_every_question_as_text_and_as_json(store: Store, database_url: str) -> None:
    payment = await parked(store, "pay Bob")
    booking = await parked(store, "book a table")
    listed = await asyncio.to_thread(tarry, "pending", "--url", database_url)
    assert listed.returncode == Exit.OK, listed.stderr
    (approval,) = await payment.pending_questions()
    (form,) = await booking.pending_questions()
    assert f"{approval.id}  approval  transfer_money(amount=20, to='Bob')" in listed.stdout
    assert f'{form.id}  form  book_table(restaurant="Luigi\'s")' in listed.stdout
    assert "time (one of 19:00, 20:00, 21:00)" in listed.stdout
    assert "party (integer; 1..12; default 2)" in listed.stdout
    as_json = await asyncio.to_thread(tarry, "pending", "--json", "--url", database_url)
    assert as_json.returncode == Exit.OK, as_json.stderr
    found = valid(schemas.PENDING, as_json.stdout)
    assert [item["id"] for item in found] == [approval.id, form.id]
    assert list(found[1]["requested_schema"]["properties"]) == ["time", "party"]
    only = await asyncio.to_thread(tarry, "pending", "--json", "--chat", booking.id, "--url", database_url)
    assert [item["id"] for item in valid(schemas.PENDING, only.stdout)] == [form.id]
    first = await asyncio.to_thread(tarry, "pending", "--limit", "1", "--url", database_url)
    assert approval.id in first.stdout and form.id not in first.stdout
    [more] = [line for line in first.stdout.splitlines() if line.startswith("More: tarry pending --limit 1 --cursor ")]
    second = await asyncio.to_thread(tarry, *more.split()[2:], "--json", "--url", database_url)
    assert [item["id"] for item in valid(schemas.PENDING, second.stdout)] == [form.id]
    assert "More:" not in second.stderr
    refused = await asyncio.to_thread(tarry, "pending", "--cursor", "nonsense", "--url", database_url)
    assert refused.returncode == Exit.USAGE and "'nonsense' is not a cursor" in refused.stderr
    assert tarry("pending", "--limit", "0", "--url", database_url).returncode == Exit.USAGE


async def test_answer_records_the_fields_and_a_second_answer_is_told_it_lost(store: Store, database_url: str) -> None:
    chat = await parked(store, "book a table")
    (form,) = await chat.pending_questions()
    done = await asyncio.to_thread(
        tarry, "answer", form.id, "--field", "time=20:00", "--field", "party=4", "--url", database_url
    )
    assert done.returncode == Exit.OK, done.stderr
    assert "Recorded: answered time='20:00', party=4" in done.stdout
    assert (await store.question(form.id)).answer == {"time": "20:00", "party": 4}
    again = await asyncio.to_thread(tarry, "answer", form.id, "--field", "time=21:00", "--url", database_url)
    assert again.returncode == Exit.TOO_LATE
    assert f"already decided by {getpass.getuser()} via cli at " in again.stderr
    assert (await store.question(form.id)).answer == {"time": "20:00", "party": 4}
    await chat.complete()
    assert chat.messages[-1].content == "Done: Booked Luigi's at 20:00 for 4."


async def test_an_invalid_answer_names_each_field_on_stderr_and_records_nothing(
    store: Store, database_url: str
) -> None:
    chat = await parked(store, "book a table")
    (form,) = await chat.pending_questions()
    refused = await asyncio.to_thread(
        tarry, "answer", form.id, "--field", "time=25:00", "--field", "party=40", "--url", database_url
    )
    assert refused.returncode == Exit.INVALID
    assert "time: '25:00' is not one of the choices ('19:00', '20:00', '21:00')" in refused.stderr
    assert "party: must be at most 12, got 40" in refused.stderr
    assert refused.stdout == ""
    assert (await store.question(form.id)).decision is None


async def test_a_single_value_answers_a_one_field_question_and_approve_answers_an_approval(
    store: Store, database_url: str
) -> None:
    chat = await parked(store, "pay Bob")
    (approval,) = await chat.pending_questions()
    refused = await asyncio.to_thread(tarry, "answer", approval.id, "yes", "--url", database_url)
    assert refused.returncode == Exit.INVALID
    assert "value: an approval takes no single value" in refused.stderr
    done = await asyncio.to_thread(tarry, "approve", approval.id, "--url", database_url)
    assert done.returncode == Exit.OK, done.stderr
    assert "Recorded: approved (transfer_money(amount=20, to='Bob'))." in done.stdout
    await chat.complete()
    assert chat.messages[-1].content == "Done: Sent 20 EUR to Bob."


async def test_decline_with_a_note_reaches_the_model(store: Store, database_url: str) -> None:
    chat = await parked(store, "pay Bob")
    (approval,) = await chat.pending_questions()
    done = await asyncio.to_thread(tarry, "decline", approval.id, "--note", "not this month", "--url", database_url)
    assert done.returncode == Exit.OK, done.stderr
    assert "declined with the note 'not this month'" in done.stdout
    await chat.complete()
    result = chat.messages[-2].result()
    assert result == {"error": "The user declined the transfer_money call.", "note": "not this month"}


async def test_unknown_ids_exit_with_their_own_status(store: Store, database_url: str) -> None:
    for arguments in (
        ("answer", "no-such-question", "x"),
        ("approve", "no-such-question"),
        ("decline", "no-such-question"),
        ("show", "no-such-chat"),
        ("cancel", "no-such-chat"),
    ):
        done = await asyncio.to_thread(tarry, *arguments, "--url", database_url)
        assert done.returncode == Exit.UNKNOWN, (arguments, done.stderr)
        assert "no-such-" in done.stderr


async def test_an_expired_question_exits_with_its_own_status(store: Store, database_url: str) -> None:
    chat = await store.create_chat(agent.make_model(), [QuickTransfer()], agent=agent.name)
    await chat.ask("pay Bob")
    (approval,) = await chat.pending_questions()
    async with asyncio.timeout(30):
        while await store.pending_questions(chat.id):  # expired questions are not listed
            await asyncio.sleep(0.05)
    late = await asyncio.to_thread(tarry, "approve", approval.id, "--url", database_url)
    assert late.returncode == Exit.EXPIRED
    assert "expired" in late.stderr.lower() or "time to live" in late.stderr.lower()


async def test_two_answerers_racing_on_one_question_record_one_decision(store: Store, database_url: str) -> None:
    for _ in range(3):
        chat = await parked(store, "pay Bob")
        (approval,) = await chat.pending_questions()
        racers = [
            start_tarry(["approve", approval.id, "--url", database_url]),
            start_tarry(["decline", approval.id, "--note", "racing", "--url", database_url]),
            start_tarry(["approve", approval.id, "--url", database_url]),
        ]
        statuses = [await asyncio.to_thread(racer.wait, 120) for racer in racers]
        for racer in racers:
            assert racer.stdout is not None and racer.stderr is not None
            racer.stdout.close()
            racer.stderr.close()
        assert sorted(statuses) == [Exit.OK, Exit.TOO_LATE, Exit.TOO_LATE]
        decided = await store.question(approval.id)
        winner = statuses.index(Exit.OK)
        assert decided.decision == ("decline" if winner == 1 else "accept")


async def test_chats_lists_them_and_waiting_keeps_the_waiting_ones(store: Store, database_url: str) -> None:
    waiting = await parked(store, "pay Bob")
    finished = await store.create_chat(agent=agent)
    await finished.ask("hello")
    listed = await asyncio.to_thread(tarry, "chats", "--url", database_url)
    assert listed.returncode == Exit.OK, listed.stderr
    lines = listed.stdout.splitlines()
    assert [line.split()[0] for line in lines] == [waiting.id, finished.id]
    assert "waiting: 1 question(s), 1 open call(s)" in lines[0]
    assert lines[1].endswith("done")
    as_json = await asyncio.to_thread(tarry, "chats", "--waiting", "--json", "--url", database_url)
    (only,) = valid(schemas.CHATS, as_json.stdout)
    assert only["id"] == waiting.id and only["agent"] == "cli-test"
    assert (only["waiting"], only["open_calls"], only["questions"], only["messages"]) == (True, 1, 1, 2)


async def test_show_prints_the_transcript_and_what_waits(store: Store, database_url: str) -> None:
    chat = await store.create_chat(agent=agent)
    await chat.ask("hello")
    await chat.ask("render the video")
    shown = await asyncio.to_thread(tarry, "show", chat.id, "--url", database_url)
    assert shown.returncode == Exit.OK, shown.stderr
    text = shown.stdout
    for expected in (
        f"Chat {chat.id}",
        "instructions: You run errands.",
        "you> hello",
        "model> You said: hello",
        "you> render the video",
        "call render_video(name='holiday')",
        "Waits on:",
        "render_video(name='holiday'): working: queued",
    ):
        assert expected in text
    printed = await asyncio.to_thread(tarry, "show", chat.id, "--json", "--url", database_url)
    as_json = valid(schemas.SHOW, printed.stdout)
    assert [message["role"] for message in as_json["transcript"]] == ["user", "assistant", "user", "assistant"]
    assert as_json["transcript"][3]["tool_calls"][0]["name"] == "render_video"
    assert as_json["tasks"][0]["status_message"] == "queued"
    assert as_json["pending_questions"] == []


async def test_tasks_lists_the_work_that_waits(store: Store, database_url: str) -> None:
    empty = await asyncio.to_thread(tarry, "tasks", "--url", database_url)
    assert (empty.returncode, empty.stdout.strip()) == (Exit.OK, "No task is working.")
    chat = await parked(store, "render")
    await chat.complete()  # one check: half done
    listed = await asyncio.to_thread(tarry, "tasks", "--url", database_url)
    assert "render_video(name='holiday')  working: rendering, 50% done" in listed.stdout
    assert f"chat {chat.id}" in listed.stdout
    (task,) = valid(schemas.TASKS, (await asyncio.to_thread(tarry, "tasks", "--json", "--url", database_url)).stdout)
    assert (task["chat_id"], task["status"], task["poll_interval"]) == (chat.id, "working", 0.2)
    assert task["tool_call"]["arguments"] == {"name": "holiday"}


async def test_cancel_asks_once(store: Store, database_url: str) -> None:
    chat = await parked(store, "render")
    asked = await asyncio.to_thread(tarry, "cancel", chat.id, "--url", database_url)
    assert asked.returncode == Exit.OK, asked.stderr
    assert (await store.chat_summary(chat.id)).cancel_requested_at is not None
    again = await asyncio.to_thread(tarry, "cancel", chat.id, "--url", database_url)
    assert again.returncode == Exit.TOO_LATE
    assert "already asked" in again.stderr


@pytest.mark.parametrize("command", [["pending"], ["chats"], ["tasks"], ["approve", "some-id"]])
def test_a_database_without_the_schema_is_unusable(tmp_path: Path, command: list[str]) -> None:
    (tmp_path / "empty.db").write_bytes(b"")
    done = tarry(*command, "--url", f"sqlite:///{tmp_path / 'empty.db'}")
    assert done.returncode == Exit.DATABASE
    assert "the database cannot be used" in done.stderr
    assert "tarry db upgrade" in done.stderr


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:///{tmp}/no/such/folder/tarry.db",
        "postgresql://postgres@127.0.0.1:1/test",  # nothing listens on port 1
        "mysql://127.0.0.1/test",
    ],
)
def test_a_database_that_cannot_be_reached_is_unusable(tmp_path: Path, url: str) -> None:
    done = tarry("pending", "--url", url.format(tmp=tmp_path))
    assert done.returncode == Exit.DATABASE, done.stderr
    assert done.stderr.startswith("tarry: the database cannot be used:")


async def test_declining_a_call_that_runs_right_now_has_its_own_status(store: Store, database_url: str) -> None:
    chat = await parked(store, "pay Bob")
    (approval,) = await chat.pending_questions()
    claimed = (  # another process holds the call right now (a lease that has not run out)
        update(tool_calls)
        .where(tool_calls.c.chat_id == chat.id)
        .values(claimed_by="another-process", claimed_until=utcnow() + timedelta(minutes=5))
    )
    await store.db.run_write(lambda connection: connection.execute(claimed))
    done = await asyncio.to_thread(tarry, "decline", approval.id, "--url", database_url)
    assert done.returncode == Exit.RUNNING == 8, done.stderr
    assert "running right now" in done.stderr
    assert [question.id for question in await store.pending_questions(chat.id)] == [approval.id]
    assert exit_status(ToolCallRunningError("the call runs")) == Exit.RUNNING
