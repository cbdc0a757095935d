"""Accountable decisions on a real database: who decided, who may, two-person approval, and the audit trail.

Every scenario ends by checking the whole trail against the questions it describes
(:func:`check_trail`), on a SQLite file and on PostgreSQL.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from sqlalchemy import select

from tarry.errors import NotAllowedError, QuestionExpiredError
from tarry.principals import Principal
from tarry.questions import SECRET
from tarry.store import Store
from tarry.store.tables import questions as question_rows
from tarry.testing import ScriptedModel, advance_clock
from tests.store.approvers import FINANCE, Payout, Unlock, may_decide
from tests.store.test_processes import finish, marker_lines
from tests.store.tools import TransferMoney, reactive_model

PAY = [{"name": "payout", "arguments": {"to": "Carol", "amount": 900}}]
SRC = Path(__file__).resolve().parents[2] / "src" / "tarry"


async def check_trail(store: Store, secrets: tuple[str, ...] = ()) -> None:
    """The trail holds exactly one ``decided`` event per decided question, agreeing with the question's row.

    Also: events come in id order, each counted approval is one of the question's votes, and no
    event holds a secret value.
    """
    events = await store.history()
    assert [event.id for event in events] == sorted(event.id for event in events)
    rows = await store.db.run_read(lambda connection: list(connection.execute(select(question_rows)).mappings()))
    for row in rows:
        mine = [event for event in events if event.question_id == row["id"]]
        decided = [event for event in mine if event.outcome == "decided"]
        if row["decision"] is None:
            assert decided == [], f"question {row['id']} is open but the trail says it was decided"
        else:
            [event] = decided
            assert (event.decision, event.at, event.channel) == (row["decision"], row["decided_at"], row["channel"])
            assert (event.by.id if event.by else None) == row["decided_by"]
        voters = [vote["id"] for vote in row["votes"] or ()]
        counted = [event.by.id for event in mine if event.outcome == "counted" and event.by is not None]
        assert counted == voters[: len(counted)]
        for event in mine:
            assert (event.chat_id, event.kind, event.message) == (row["chat_id"], row["kind"], row["message"])
    text = json.dumps([event.to_dict() for event in events])
    for secret in secrets:
        assert secret not in text


def transfer(to: str, amount: int) -> list[dict[str, object]]:
    return [{"name": "transfer_money", "arguments": {"to": to, "amount": amount}}]


async def payout_question(store: Store) -> tuple[str, str]:
    """A chat whose payout waits on two people of finance: its id and the approval's id."""
    chat = await store.create_chat(reactive_model(PAY), [Payout()])
    await chat.ask("Pay Carol 900")
    [question] = await store.pending_questions(chat.id)
    assert question.policy is not None and (question.policy.count, question.policy.by) == (2, "finance")
    return chat.id, question.id


async def test_two_people_of_finance_approve_then_the_call_runs_once(
    finance: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    markers = tmp_path / "markers"
    monkeypatch.setenv("TARRY_TEST_MARKERS", str(markers))
    chat_id, question_id = await payout_question(finance)

    assert await finance.approve(question_id, by=Principal("ann", "Ann Archer"), channel="web") is True
    [still] = await finance.pending_questions(chat_id)  # one approval is not enough
    assert still.decision is None and [vote.principal.id for vote in still.votes] == ["ann"]
    chat = await finance.load_chat(chat_id, reactive_model(PAY), [Payout()])
    await chat.complete()
    assert chat.waiting and marker_lines(markers, "payout") == []

    assert await finance.approve(question_id, by="bob", channel="cli") is True
    decided = await finance.question(question_id)
    assert (decided.decision, decided.decided_by, decided.channel) == ("accept", Principal("bob"), "cli")
    assert [vote.principal for vote in decided.votes] == [Principal("ann", "Ann Archer"), Principal("bob")]
    await chat.complete()
    assert not chat.waiting and marker_lines(markers, "payout") == ["Carol:900"]

    assert await finance.approve(question_id, by="ann") is False  # a late attempt loses, and is on the trail
    events = await finance.history(question_id=question_id)
    assert [(event.outcome, event.by.id if event.by else None, event.channel) for event in events] == [
        ("counted", "ann", "web"),
        ("decided", "bob", "cli"),
        ("lost", "ann", "code"),
    ]
    assert events[0].tool == "payout" and events[0].arguments == {"to": "Carol", "amount": 900}
    assert events[0].message == "Approve the payout call?" and events[2].detail == "already decided (accept) by bob"
    assert [event.id for event in await finance.history(chat_id)] == [event.id for event in events]
    assert [event.id for event in await finance.history(after=events[0].id, limit=1)] == [events[1].id]
    assert await finance.history(after=2**80) == [], "nothing comes after a number larger than any id"
    assert len(await finance.history(limit=2**80)) == 3
    with pytest.raises(ValueError, match="after must be an event id"):
        await finance.history(after=-1)
    await check_trail(finance)


async def test_the_same_person_cannot_approve_twice(finance: Store) -> None:
    _, question_id = await payout_question(finance)
    assert await finance.approve(question_id, by="ann")
    with pytest.raises(
        NotAllowedError, match="Another name, same person already approved the payout call; it needs 2 different people"
    ):
        await finance.approve(question_id, by=Principal("ann", "Another name, same person"))
    assert (await finance.question(question_id)).decision is None
    assert [event.outcome for event in await finance.history(question_id=question_id)] == ["counted", "refused"]
    await check_trail(finance)


async def test_a_decline_after_one_approval_ends_the_call(
    finance: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    markers = tmp_path / "markers"
    monkeypatch.setenv("TARRY_TEST_MARKERS", str(markers))
    chat_id, question_id = await payout_question(finance)
    assert await finance.approve(question_id, by="ann")
    assert await finance.decline(question_id, "Not this quarter", by="bob", channel="web")
    chat = await finance.load_chat(chat_id, reactive_model(PAY), [Payout()])
    await chat.complete()
    assert not chat.waiting and marker_lines(markers, "payout") == []
    result = json.loads(chat.messages[2].content)
    assert result["note"] == "Not this quarter"
    assert [(event.outcome, event.decision) for event in await finance.history(chat_id)] == [
        ("counted", "accept"),
        ("decided", "decline"),
    ]
    await check_trail(finance)


async def test_the_policy_refuses_outsiders_anonymous_deciders_and_stores_without_a_check(
    finance: Store, database_url: str
) -> None:
    _, question_id = await payout_question(finance)
    with pytest.raises(NotAllowedError, match=r"mallory may not decide the payout call \(it needs 'finance'\)"):
        await finance.approve(question_id, by="mallory")
    with pytest.raises(NotAllowedError, match="mallory may not decide"):
        await finance.decline(question_id, by="mallory")  # nor end it
    with pytest.raises(NotAllowedError, match="needs to know who decides"):
        await finance.approve(question_id)
    async with Store(database_url) as unchecked:
        with pytest.raises(NotAllowedError, match="nothing checks who that is: give the store may_decide"):
            await unchecked.approve(question_id, by="ann")
    assert (await finance.question(question_id)).decision is None
    events = await finance.history(question_id=question_id)
    assert [(event.outcome, event.by.id if event.by else None) for event in events] == [
        ("refused", "mallory"),
        ("refused", "mallory"),
        ("refused", None),
        ("refused", "ann"),
    ]
    assert events[0].detail == "mallory may not decide the payout call (it needs 'finance')"
    await check_trail(finance)


async def test_a_self_declared_name_neither_counts_nor_satisfies_by(finance: Store) -> None:
    _, question_id = await payout_question(finance)
    for name in ("ann", "bob"):  # finance's members, but nobody checked who typed their names
        with pytest.raises(NotAllowedError, match=f"{name} is a self-declared name that nobody checked"):
            await finance.approve(question_id, by=Principal(name, verified=False))
    assert await finance.approve(question_id, by="ann")  # the application's code vouches for it
    with pytest.raises(NotAllowedError, match="bob is a self-declared name"):
        await finance.approve(question_id, by=Principal("bob", verified=False))
    assert (await finance.question(question_id)).decision is None
    assert await finance.approve(question_id, by="bob")
    assert (await finance.question(question_id)).decision == "accept"
    await check_trail(finance)


async def test_may_decide_admits_only_with_true_and_is_never_an_unawaited_coroutine(
    finance: Store, database_url: str
) -> None:
    async def in_finance(principal: Principal, question: object) -> bool:
        return principal.id in FINANCE

    class AsyncCheck:
        async def __call__(self, principal: Principal, question: object) -> bool:
            return True

    for check in (in_finance, AsyncCheck()):
        with pytest.raises(TypeError, match="not a coroutine function"):
            Store(database_url, may_decide=check)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="not a coroutine function"):
            finance.may_decide = check  # type: ignore[assignment]
    assert finance.may_decide is may_decide  # the refused check was not installed
    _, question_id = await payout_question(finance)
    finance.may_decide = lambda principal, question: in_finance(principal, question)  # type: ignore[assignment,return-value]
    with pytest.raises(TypeError, match="may_decide returned coroutine, an awaitable"):
        await finance.approve(question_id, by="mallory")
    finance.may_decide = lambda principal, question: 1  # type: ignore[assignment,return-value]
    with pytest.raises(NotAllowedError, match="may_decide returned 1, and only True admits"):
        await finance.approve(question_id, by="ann")
    assert (await finance.question(question_id)).votes == ()
    # The awaitable rolled its attempt back; the truthy one is refused on the trail.
    assert [event.outcome for event in await finance.history(question_id=question_id)] == ["refused"]


class HastyTransfer(TransferMoney):
    """Moves money, if someone approves within a minute."""

    name = "transfer_money"
    approval_ttl = 60


async def test_every_decision_records_who_and_through_what_and_lost_attempts_too(finance: Store) -> None:
    chat = await finance.create_chat(
        reactive_model([{"name": "transfer_money", "arguments": {"to": "Bob", "amount": 5}}]), [TransferMoney()]
    )
    await chat.ask("Pay Bob 5")
    [question] = await chat.pending_questions()
    assert question.policy is None  # requires_approval = True: one person, anyone
    assert await chat.approve(question, by=Principal("u-7", "Ann"), channel="mcp")
    question = await chat.question(question)
    assert (question.decided_by, question.channel) == (Principal("u-7", "Ann"), "mcp")
    assert not await finance.decline(question.id, "too late", by="bob")

    second = await finance.create_chat(
        reactive_model([{"name": "transfer_money", "arguments": {"to": "Eve", "amount": 1}}]), [TransferMoney()]
    )
    await second.ask("Pay Eve 1")
    [anonymous] = await second.pending_questions()
    assert await finance.approve(anonymous.id)  # no identity: allowed in code, recorded as such
    assert (await finance.question(anonymous.id)).decided_by is None

    third = await finance.create_chat(
        reactive_model([{"name": "transfer_money", "arguments": {"to": "Dan", "amount": 2}}]), [HastyTransfer()]
    )
    await third.ask("Pay Dan 2")
    [lapsing] = await third.pending_questions()
    advance_clock(61)
    with pytest.raises(QuestionExpiredError):
        await finance.approve(lapsing.id, by="ann")

    outcomes = [
        (event.question_id, event.outcome, event.by.label if event.by else None) for event in await finance.history()
    ]
    assert outcomes == [
        (question.id, "decided", "Ann"),
        (question.id, "lost", "bob"),
        (anonymous.id, "decided", None),
        (lapsing.id, "expired", "ann"),
    ]
    with pytest.raises(ValueError, match="channel must be one of api, web, cli, code, mcp, slack, email; got 'fax'"):
        await finance.approve(lapsing.id, channel="fax")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="by= takes an identity"):
        await finance.approve(lapsing.id, by=7)  # type: ignore[arg-type]
    await check_trail(finance)


async def test_secret_fields_stay_out_of_the_trail_and_the_logs(
    finance: Store, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    model = ScriptedModel([[{"name": "unlock", "arguments": {"vault": "north"}}], "Open."])
    chat = await finance.create_chat(model, [Unlock()])
    await chat.ask("Open the north vault")
    [question] = await chat.pending_questions()
    assert [field.secret for field in question.fields] == [True, False]
    assert await finance.answer(question.id, pin="480175", reason="audit", by="ann", channel="web")
    await chat.complete()
    assert chat.messages[-2].content == "north unlocked (6 digits)"  # the tool got the real value
    [event] = await finance.history(chat.id)
    assert event.answer == {"pin": SECRET, "reason": "audit"}
    assert (await finance.question(question.id)).to_dict()["answer"] == {"pin": SECRET, "reason": "audit"}
    assert "480175" not in caplog.text
    for record in caplog.records:
        assert "480175" not in json.dumps(record.__dict__, default=str)
    await check_trail(finance, secrets=("480175",))


async def test_two_approvers_in_two_processes_race_on_two_person_calls(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    markers = tmp_path / "markers"
    monkeypatch.setenv("TARRY_TEST_MARKERS", str(markers))
    async with Store(database_url, may_decide=may_decide) as store:
        await store.setup()
        chats = {}
        for number in range(20):
            chat = await store.create_chat(
                reactive_model([{"name": "payout", "arguments": {"to": f"p{number}", "amount": number}}]), [Payout()]
            )
            await chat.ask(f"Pay p{number}")
            [question] = await chat.pending_questions()
            chats[question.id] = chat
        ids_file, start_file = tmp_path / "ids.json", tmp_path / "go"
        ids_file.write_text(json.dumps(list(chats)))
        # ann in two processes (she counts once), bob in one
        processes = [_approver(database_url, ids_file, start_file, who, markers) for who in ("ann", "bob", "ann")]
        start_file.touch()
        results = [json.loads(finish(process)) for process in processes]
        for question_id, chat in chats.items():
            ann, bob, ann_again = (result[question_id] for result in results)
            assert bob == "recorded"  # without him nobody could have decided
            # ann counts once: her other attempt is refused, or lost when both approvals were in by then
            assert sorted([ann, ann_again]) in (["recorded", "refused"], ["lost", "recorded"])
            decided = await store.question(question_id)
            assert decided.decision == "accept" and sorted(vote.principal.id for vote in decided.votes) == [
                "ann",
                "bob",
            ]
            await chat.complete()
            assert not chat.waiting
        paid = marker_lines(markers, "payout")
        assert sorted(paid) == sorted(f"p{number}:{number}" for number in range(20))  # each ran once
        await check_trail(store)
        assert {event.by.id for event in await store.history() if event.by} <= set(FINANCE)


def _approver(url: str, ids_file: Path, start_file: Path, who: str, markers: Path):  # type: ignore[no-untyped-def]
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "TARRY_TEST_MARKERS": str(markers),
        "PYTHONPATH": os.pathsep.join([str(root / "src"), str(root)]),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "tests.store.approvers", url, str(ids_file), str(start_file), who],
        cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def test_no_code_path_updates_or_deletes_the_audit_trail() -> None:
    writes = re.compile(
        r"(update|delete)\(\s*decision_events|decision_events\s*\.\s*(update|delete)"
        r"|(UPDATE|DELETE\s+FROM)\s+tarry_decision_events",
        re.IGNORECASE,
    )
    found = [
        f"{path.relative_to(SRC)}:{number}"
        for path in SRC.rglob("*.py")
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if writes.search(line)
    ]
    assert found == []  # a prune keeps the trail too
    uses = [
        path.name
        for path in SRC.rglob("*.py")
        if "decision_events" in path.read_text() and "migrations" not in path.parts
    ]
    assert sorted(uses) == ["audit.py", "tables.py"]  # every write of the trail goes through store/audit.py


async def wakes_listeners(postgres_url: str, chat_id: str, act: Callable[[], Awaitable[bool]]) -> bool:
    """Whether a notification naming ``chat_id`` reaches a listener within 10 s of ``act()``, which must succeed."""
    import psycopg

    from tarry.store.schedule import WAKE_CHANNEL

    plain = postgres_url.replace("postgresql+psycopg://", "postgresql://")
    async with await psycopg.AsyncConnection.connect(plain, autocommit=True) as listener:
        await listener.execute(f"LISTEN {WAKE_CHANNEL}")
        assert await act()
        # NOTIFY is database-wide: other tests' chats may be woken meanwhile, so look for this one's
        async for note in listener.notifies(timeout=10):
            if note.payload == chat_id:
                return True
    return False


async def test_a_decision_notifies_listeners_on_postgresql(postgres_url: str) -> None:
    async with Store(postgres_url) as store:
        await store.setup()
        chat = await store.create_chat(reactive_model(transfer("Bob", 5)), [TransferMoney()])
        await chat.ask("Pay Bob 5")
        [question] = await chat.pending_questions()
        heard = await wakes_listeners(postgres_url, chat.id, lambda: store.approve(question.id, by="ann"))
        assert heard, "no notification named the chat within 10 s"


async def test_a_cancellation_notifies_listeners_on_postgresql(postgres_url: str) -> None:
    async with Store(postgres_url) as store:
        await store.setup()
        chat = await store.create_chat(reactive_model(transfer("Bob", 5)), [TransferMoney()])
        await chat.ask("Pay Bob 5")
        heard = await wakes_listeners(postgres_url, chat.id, lambda: store.cancel(chat.id))
        assert heard, "no notification named the chat within 10 s"
