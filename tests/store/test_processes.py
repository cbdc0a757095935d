"""Real OS processes against one database: races, crashes and concurrent completes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tarry import Chat, Question
from tarry.store import Store
from tests.store.tools import TransferMoney, all_tools, reactive_model

ROOT = Path(__file__).resolve().parents[2]
TRANSFER = [{"name": "transfer_money", "arguments": {"to": "Bob", "amount": 5}}]


def start(*args: str, markers: Path, durability: str = "full") -> subprocess.Popen[str]:
    # This tree's tarry first, whichever checkout the environment installed.
    env = {
        **os.environ,
        "TARRY_TEST_MARKERS": str(markers),
        "PYTHONPATH": os.pathsep.join((str(ROOT / "src"), str(ROOT))),
    }
    env["TARRY_TEST_DURABILITY"] = durability
    return subprocess.Popen(
        [sys.executable, "-m", "tests.store.proc", *args],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def finish(process: subprocess.Popen[str], timeout: float = 120) -> str:
    out, err = process.communicate(timeout=timeout)
    assert process.returncode == 0, err
    return out


def wait_for(path: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.02)


def marker_lines(markers: Path, kind: str) -> list[str]:
    if not markers.exists():
        return []
    return [line.split(" ", 1)[1] for line in markers.read_text().splitlines() if line.startswith(kind + " ")]


@pytest.mark.parametrize("durability", ["full", "fast"])
async def test_eight_processes_racing_on_100_approvals_record_one_decision_each(
    database_url: str, tmp_path: Path, durability: str
) -> None:
    markers = tmp_path / "markers"
    async with Store(database_url) as store:
        await store.setup()
        chat_ids = []
        for number in range(100):
            chat = await store.create_chat(
                reactive_model([{"name": "transfer_money", "arguments": {"to": f"p{number}", "amount": number}}]),
                [TransferMoney()],
            )
            await chat.ask(f"Pay p{number}")
            chat_ids.append(chat.id)
        questions = await store.pending_questions()
    assert len(questions) == 100
    ids_file, start_file = tmp_path / "ids.json", tmp_path / "go"
    ids_file.write_text(json.dumps([question.id for question in questions]))

    deciders = [
        start("decide", database_url, str(ids_file), str(seed), str(start_file), markers=markers, durability=durability)
        for seed in range(8)
    ]
    time.sleep(0.5)  # let the processes import and connect; correctness does not depend on it
    start_file.touch()
    outcomes = [json.loads(finish(process)) for process in deciders]

    winners = Counter(question_id for won in outcomes for question_id in won)
    assert set(winners) == {question.id for question in questions}
    assert set(winners.values()) == {1}, "a question was decided twice"
    decided = {question_id: decision for won in outcomes for question_id, decision in won.items()}
    async with Store(database_url) as store:
        for question in questions:
            assert (await store.question(question.id)).decision == decided[question.id]

    carriers = [
        start("carry", database_url, *chat_ids[part::4], markers=markers, durability=durability) for part in range(4)
    ]
    for process in carriers:
        finish(process)
    ran = Counter(marker_lines(markers, "transfer"))
    approved = {f"p{number}:{number}" for number, question in enumerate(questions)
                if decided[question.id] == "accept"}  # fmt: skip
    assert set(ran) == approved
    assert set(ran.values()) <= {1}, "an approved tool ran twice"


@pytest.mark.parametrize("idempotent", [False, True])
async def test_a_process_killed_while_a_tool_runs(database_url: str, tmp_path: Path, idempotent: bool) -> None:
    markers, ready, release = tmp_path / "markers", tmp_path / "ready", tmp_path / "release"
    name = "idempotent_hang" if idempotent else "hang"
    calls = [{"name": name, "arguments": {"ready": str(ready), "release": str(release)}}]
    async with Store(database_url) as store:
        await store.setup()
        chat_id = (await store.create_chat()).id

    doomed = start("run", database_url, chat_id, "1.0", json.dumps(calls), "Hang on", markers=markers)
    wait_for(ready)
    doomed.send_signal(signal.SIGKILL)
    doomed.wait(timeout=30)
    ready.unlink()
    release.touch()

    deadline = time.monotonic() + 90
    while True:
        survivor = start("run", database_url, chat_id, "1.0", json.dumps(calls), markers=markers)
        outcome = json.loads(finish(survivor))
        if outcome["reply"] == "All done." or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert outcome == {"reply": "All done.", "waiting": False}, f"still not done after the lease: {outcome}"

    async with Store(database_url) as store:
        chat = await store.load_chat(chat_id, reactive_model(calls))
    result = chat.messages[2].content
    runs = marker_lines(markers, "hang")
    if idempotent:
        assert result == "released"
        assert len(runs) == 2
    else:
        assert "interrupted" in json.loads(result)["error"]
        assert len(runs) == 1, "a non-idempotent tool ran twice"


BOOK = [{"name": "book_seats", "arguments": {"restaurant": "Roma"}}]


async def asked_in_a_process_then_killed(store: Store, tmp_path: Path) -> tuple[str, Question]:
    """A chat whose call asked a question while it ran, in a process killed before anyone answered."""
    await store.setup()
    chat_id = (await store.create_chat()).id
    doomed = start("run", str(store.db.url), chat_id, "1.0", json.dumps(BOOK), "Book Roma", markers=tmp_path / "m")
    deadline = time.monotonic() + 30
    while not (waiting := await store.pending_questions(chat_id)):
        assert time.monotonic() < deadline and doomed.poll() is None, "the question was never asked"
        await asyncio.sleep(0.05)
    doomed.send_signal(signal.SIGKILL)
    doomed.wait(timeout=30)
    return chat_id, waiting[0]


async def run_again(store: Store, chat_id: str, runs: Path) -> tuple[Chat, asyncio.Task[object]]:
    """Carry the chat on in this process, once its lease ran out: the call's tool runs again."""
    deadline = time.monotonic() + 30
    while True:
        chat = await store.load_chat(chat_id, reactive_model(BOOK), all_tools())
        carrying = asyncio.create_task(chat.complete())
        while not carrying.done() and len(marker_lines(runs, "book")) < 2:
            await asyncio.sleep(0.02)
        if len(marker_lines(runs, "book")) == 2:
            return chat, carrying
        await carrying  # the lease still held: the call waits for the process that ran it
        assert time.monotonic() < deadline, "the call was never taken over"
        await asyncio.sleep(0.1)


@pytest.mark.parametrize("answered", ["before the tool runs again", "while it runs again"])
async def test_a_tool_run_again_after_its_process_died_is_not_asked_its_question_twice(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answered: str
) -> None:
    """An idempotent tool that asked a question while it ran runs again once its process died. It asks the same
    question, and gets the answer given to the first run (or waits for it): a person answers once."""
    runs = tmp_path / "m"
    monkeypatch.setenv("TARRY_TEST_MARKERS", str(runs))
    async with Store(database_url, lease=1.0, poll_interval=0.05) as store:
        chat_id, question = await asked_in_a_process_then_killed(store, tmp_path)
        if answered == "before the tool runs again":
            assert await store.answer(question.id, {"seats": 3}, by="ann@example.com")
        chat, carrying = await run_again(store, chat_id, runs)
        if answered == "while it runs again":
            assert await store.answer(question.id, {"seats": 3}, by="ann@example.com")
        reply = await asyncio.wait_for(carrying, 30)
        assert reply is not None and reply == chat.last_reply and not chat.waiting
        assert [message.content for message in await store.messages(chat_id) if message.role == "tool"] == [
            "Booked 3 at Roma"
        ]
        (record,) = chat.records.values()
        assert [asked.id for asked in record.questions] == [question.id], "the question was asked again"
        assert [event.outcome for event in await store.history(chat_id)] == ["decided"]
    assert marker_lines(runs, "book") == ["Roma", "Roma"]


@pytest.mark.parametrize("durability", ["full", "fast"])
async def test_two_processes_completing_one_chat_at_once(database_url: str, tmp_path: Path, durability: str) -> None:
    markers, go = tmp_path / "markers", tmp_path / "go"
    calls = [
        {"name": "slow_job", "arguments": {"job": "a"}},
        {"name": "transfer_money", "arguments": {"to": "Al", "amount": 1}},
    ]
    async with Store(database_url) as store:
        await store.setup()
        chat = await store.create_chat()
    for round_number in range(3):
        texts = ["Go", ""] if round_number == 0 else ["", ""]
        racers = [
            start(
                "race", database_url, chat.id, str(go), json.dumps(calls), text, markers=markers, durability=durability
            )
            for text in texts
        ]
        time.sleep(0.3)
        go.touch()
        for process in racers:
            finish(process)
        go.unlink()
        async with Store(database_url) as store:
            for question in await store.pending_questions(chat.id):
                await store.approve(question.id)
    async with Store(database_url) as store:
        loaded = await store.load_chat(chat.id, reactive_model(calls))
        roles = [message.role for message in loaded.messages]
    assert roles[-1] == "assistant" and loaded.messages[-1].content == "All done."
    assert roles.count("assistant") == 2, "the model's reply was recorded twice"
    assert Counter(marker_lines(markers, "model")) == {"1": 1, "4": 1}, "the model was called twice for one turn"
    assert marker_lines(markers, "transfer") == ["Al:1"]


async def test_a_process_that_lost_its_lease_writes_nothing(database_url: str, tmp_path: Path) -> None:
    markers, release = tmp_path / "markers", tmp_path / "release"
    calls = [{"name": "block_loop", "arguments": {"release": str(release)}}]
    async with Store(database_url) as store:
        await store.setup()
        chat_id = (await store.create_chat()).id

    starved = start("run", database_url, chat_id, "0.5", json.dumps(calls), "Block", markers=markers)
    deadline = time.monotonic() + 60
    while not marker_lines(markers, "block"):
        assert time.monotonic() < deadline and starved.poll() is None, "the tool never started"
        time.sleep(0.02)
    async with Store(database_url) as store:
        while True:  # the starved process cannot renew: wait until its lease has run out
            chat = await store.load_chat(chat_id)
            claimed_until = await claim_of(store, chat_id)
            if claimed_until is not None and claimed_until < datetime.now(UTC):
                break
            assert time.monotonic() < deadline, "the lease never ran out"
            time.sleep(0.05)
    taker = start("run", database_url, chat_id, "0.5", json.dumps(calls), markers=markers)
    assert json.loads(finish(taker)) == {"reply": "All done.", "waiting": False}
    release.touch()
    assert json.loads(finish(starved)) == {"reply": "All done.", "waiting": False}

    async with Store(database_url) as store:
        chat = await store.load_chat(chat_id)
    assert [(message.role, message.content) for message in chat.messages[1:]] == [
        ("assistant", ""),
        ("tool", "second run"),
        ("assistant", "All done."),
    ]


async def claim_of(store: Store, chat_id: str) -> datetime | None:
    from sqlalchemy import select

    from tarry.store.tables import tool_calls

    query = select(tool_calls.c.claimed_until).where(tool_calls.c.chat_id == chat_id)
    found: datetime | None = await store.db.run_read(lambda connection: connection.scalar(query))
    return found
