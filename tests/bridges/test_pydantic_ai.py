"""The pydantic-ai bridge on SQLite and PostgreSQL: a run parked, decided and carried on, in real processes."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import IO

import pytest

from tarry.bridges import StandIn
from tarry.bridges.pydantic_ai import PydanticAIBridge
from tarry.errors import BridgeError, NotAllowedError, QuestionExpiredError
from tarry.jobs import continue_chat
from tarry.principals import Principal
from tarry.store import Store
from tarry.testing import advance_clock
from tests.bridges import processes
from tests.bridges.hang import hang_at, kill_when_hung
from tests.bridges.processes import finish, start_together
from tests.bridges.runs import PROMPT, finished_by_a_worker, make_agent, make_bridge, refunds_done
from tests.web.client import AUTH, Inbox

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def refunds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The file each run of ``refund`` appends to, in this process and the ones it starts."""
    path = tmp_path / "refunds"
    monkeypatch.setenv("TARRY_TEST_REFUNDS", str(path))
    return path


def start(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """``python -m tests.bridges.proc ARGS`` in a real process, on this checkout's tarry (with ``env`` added)."""
    return processes.start("tests.bridges.proc", *args, env=env)


def start_celery_worker(name: str, log: IO[str]) -> subprocess.Popen[str]:
    """A Celery worker of ``tests.bridges.celery_app`` (threads pool, two at once), its output in ``log``."""
    command = [sys.executable, "-m", "celery", "-A", "tests.bridges.celery_app", "worker", "--pool", "threads",
               "--concurrency", "2", "--loglevel", "WARNING", "--without-gossip", "--without-mingle",
               "--without-heartbeat", "-n", name]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=log, text=True)


def tarry_cli(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "tarry.cli", *args],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


async def parked(store: Store, bridge: PydanticAIBridge, prompt: str = PROMPT) -> str:
    result = await bridge.pydantic_agent.run(prompt)
    chat = await bridge.park(store, result)
    return chat.id


async def approved_refund(database_url: str) -> str:
    """The id of a new chat whose one refund call was approved."""
    async with Store(database_url) as store:
        await store.setup()
        chat_id = await parked(store, make_bridge(), "Refund order A17")
        (question,) = await store.pending_questions(chat_id)
        assert await store.approve(question.id)
    return chat_id


async def test_parked_in_one_process_decided_in_a_second_carried_on_in_a_third(database_url: str) -> None:
    async with Store(database_url) as store:
        await store.setup()
    chat_id = str(finish(start("park", database_url))["chat"])
    listed = json.loads(tarry_cli("pending", "--json", "--url", database_url))
    assert sorted(item["tool_call"]["name"] for item in listed) == ["lookup", "refund"]
    assert refunds_done() == []
    assert finish(start("decide", database_url, chat_id)) == {"approved": True, "given": True}
    assert refunds_done() == []  # deciding runs nothing: carrying on does
    last = finish(start("carry", database_url, chat_id))
    assert last["role"] == "assistant"
    assert "refund: Refunded A17" in str(last["last"])
    assert "lookup: {'invoice': 'INV-9'}" in str(last["last"])
    assert len(refunds_done()) == 1
    async with Store(database_url) as store:
        assert await store.pending_questions() == []
        trail = await store.history(chat_id)
        assert sorted((event.decision, event.by) for event in trail if event.outcome == "decided") == [
            ("accept", Principal("ann")),
            ("respond", Principal("ann")),
        ]


def test_the_json_api_lists_and_decides_a_bridged_run(database_url: str) -> None:
    with Store(database_url) as store:
        store.setup_sync()
    chat_id = str(finish(start("park", database_url))["chat"])
    inbox = Inbox(database_url)
    with inbox.client:
        listed = inbox.client.get("/api/questions", params={"chat_id": chat_id}, headers=AUTH).json()
        waiting = {item["tool_call"]["name"]: item for item in listed}
        assert waiting["refund"]["tool_call"]["arguments"] == {"order": "A17"}
        assert waiting["lookup"]["kind"] == "approval"
        declined = inbox.client.post(
            f"/api/questions/{waiting['refund']['id']}/decline", json={"note": "Refunded by phone"}, headers=AUTH
        )
        assert declined.json()["recorded"] is True
        given = inbox.client.post(
            f"/api/questions/{waiting['lookup']['id']}/respond", json={"result": "INV-9"}, headers=AUTH
        )
        assert given.json()["recorded"] is True
        inbox.client.portal.call(inbox.store.close)  # type: ignore[union-attr]
    last = finish(start("carry", database_url, chat_id))
    assert last["last"] == "refund: Refunded by phone | lookup: INV-9"
    assert refunds_done() == []


async def test_two_celery_workers_carry_a_decided_run_on_once(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker = os.environ.get("TARRY_TEST_REDIS_URL")
    if not broker:
        pytest.skip("The Celery test needs TARRY_TEST_REDIS_URL (e.g. .ci/run's value) and a running Redis")
    monkeypatch.setenv("TARRY_TEST_CELERY_BROKER", broker)
    monkeypatch.setenv("TARRY_TEST_CELERY_DB", postgres_url)
    monkeypatch.setenv("TARRY_TEST_CELERY_QUEUE", f"tarry-bridges-{uuid.uuid4().hex[:8]}")
    from tarry.jobs.celery import enqueue_on_decisions
    from tests.bridges.celery_app import make_app

    logs = [(tmp_path / f"worker-{number}.out").open("w+") for number in range(2)]
    workers = [start_celery_worker(f"b{number}@%h", log) for number, log in enumerate(logs)]
    try:
        async with Store(postgres_url) as store:
            await store.setup()
            bridge = make_bridge()
            chat_id = await parked(store, bridge)
            enqueue_on_decisions(store, make_app(broker, postgres_url))
            waiting = {question.tool_call.name: question for question in await store.pending_questions(chat_id)}
            assert await store.approve(waiting["refund"].id)
            assert await store.respond(waiting["lookup"].id, "INV-9") is not None
            deadline = time.monotonic() + 120
            while True:
                chat = await store.load_chat(chat_id, bridge.agent.make_model(), bridge.agent.tools)
                if chat.messages[-1].role == "assistant" and not chat.messages[-1].tool_calls:
                    break
                assert time.monotonic() < deadline, "no Celery worker carried the run on"
                await asyncio.sleep(0.1)
        assert chat.messages[-1].content == "refund: Refunded A17 | lookup: INV-9"
        assert len(refunds_done()) == 1
        assert refunds_done()[0].split()[1] != str(os.getpid())  # a worker ran it, not this process
    finally:
        for worker in workers:
            worker.terminate()
        for worker, log in zip(workers, logs, strict=True):
            worker.wait(timeout=60)
            log.close()


async def test_eight_processes_racing_conflicting_decisions_record_one(database_url: str, tmp_path: Path) -> None:
    async with Store(database_url) as store:
        await store.setup()
        chat_id = await parked(store, make_bridge(), "Refund order A17")
        (question,) = await store.pending_questions(chat_id)
    go = tmp_path / "go"
    racers = [
        start("race", database_url, question.id, "accept" if n % 2 else "decline", f"p{n}", str(go)) for n in range(8)
    ]
    start_together(go, racers)
    outcomes = [finish(racer) for racer in racers]
    winners = [outcome for outcome in outcomes if outcome["recorded"]]
    assert len(winners) == 1
    (winner,) = winners
    async with Store(database_url) as store:
        decided = await store.question(question.id)
        assert decided.decision == winner["decision"]
        assert decided.decided_by == Principal(str(winner["who"]))
        attempts = await store.history(chat_id)
        assert len(attempts) == 8 and [event.outcome for event in attempts].count("decided") == 1
        bridge = make_bridge()
        await continue_chat(store, chat_id, [bridge.agent])
        chat = await store.load_chat(chat_id, bridge.agent.make_model(), bridge.agent.tools)
    assert len(refunds_done()) == (1 if winner["decision"] == "accept" else 0)
    if winner["decision"] == "decline":
        assert f"declined by {winner['who']}" in chat.messages[-1].content


async def test_four_processes_carrying_the_same_run_on_refund_once(database_url: str, tmp_path: Path) -> None:
    chat_id = await approved_refund(database_url)
    go = tmp_path / "go"
    carriers = [start("carry", database_url, chat_id, str(go)) for _ in range(4)]
    start_together(go, carriers)
    for carrier in carriers:
        finish(carrier)
    async with Store(database_url) as store:
        bridge = make_bridge()
        deadline = time.monotonic() + 60
        while True:  # a carrier that found the turn held leaves the chat due: carry it on until it is done
            chat = await store.load_chat(chat_id, bridge.agent.make_model(), bridge.agent.tools)
            if chat.messages[-1].role == "assistant" and not chat.messages[-1].tool_calls:
                break
            assert time.monotonic() < deadline, "the chat was never carried to its end"
            await continue_chat(store, chat_id, [bridge.agent])
    assert chat.messages[-1].content == "refund: Refunded A17"
    assert len(refunds_done()) == 1
    assert refunds_done()[0].split()[1] != str(os.getpid())  # one of the four carried it on
    assert [message.role for message in chat.messages] == ["user", "assistant", "tool", "assistant"]


INTERRUPTED = (
    "refund: The refund call was interrupted: the process running it stopped before it recorded a result, "
    "so whether the tool finished is not known."
)


@pytest.mark.parametrize(("hang_in", "told"), [("refund", INTERRUPTED), ("reply", "refund: Refunded A17")])
async def test_a_process_killed_while_carrying_on_leaves_the_approved_tool_run_once(
    database_url: str, tmp_path: Path, hang_in: str, told: str
) -> None:
    """SIGKILL mid-tool (``refund``: the tool ran, its result unrecorded) or after it (``reply``: the model was
    being asked with its recorded result): the next process does not run the tool again, and the model is told."""
    chat_id = await approved_refund(database_url)
    mark = tmp_path / "hanging"
    kill_when_hung(start("carry", database_url, chat_id, "", "2", env=hang_at(hang_in, mark)), mark)
    assert len(refunds_done()) == 1
    last = finish(start("carry_to_the_end", database_url, chat_id, "2"))
    assert len(refunds_done()) == 1  # not run again
    assert last == {"last": told, "roles": ["user", "assistant", "tool", "assistant"]}


async def test_a_declines_note_reaches_the_model_and_the_tool_never_runs(store: Store) -> None:
    bridge = make_bridge()
    chat_id = await parked(store, bridge)
    waiting = {question.tool_call.name: question for question in await store.pending_questions(chat_id)}
    assert await store.decline(waiting["refund"].id, "A17 was refunded last week")
    assert await store.decline(waiting["lookup"].id, "The accounts system is down")
    assert await continue_chat(store, chat_id, [bridge.agent]) is None
    chat = await store.load_chat(chat_id, bridge.agent.make_model(), bridge.agent.tools)
    assert chat.messages[-1].content == ("refund: A17 was refunded last week | lookup: The accounts system is down")
    assert refunds_done() == []


async def test_standing_grants_on_both_calls_park_the_run_due_and_a_worker_refunds_once(store: Store) -> None:
    bridge = make_bridge()
    for tool in ("refund", "lookup"):
        await store.grant(tool, by="ops-ada", agent="refunds")
    chat = await bridge.park(store, await bridge.pydantic_agent.run(PROMPT))  # every call approved as it parked
    assert await store.pending_questions(chat.id) == []
    assert refunds_done() == []  # approved, not run: parking never runs the foreign run on
    chat = await finished_by_a_worker(store, chat.id, bridge.agent)
    given = "lookup: A person approved this call but gave no result for it."  # a granted external call fails
    assert chat.messages[-1].content == f"refund: Refunded A17 | {given}"
    assert len(refunds_done()) == 1
    decided = [event for event in await store.history(chat.id) if event.outcome == "decided"]
    assert sorted(event.channel for event in decided) == ["grant", "grant"]


async def test_two_people_must_approve_a_bridged_call(store: Store) -> None:
    bridge = make_bridge(two_people=True)
    chat_id = await parked(store, bridge, "Refund order A17")
    (question,) = await store.pending_questions(chat_id)
    assert question.policy is not None and question.policy.count == 2
    assert await store.approve(question.id, by=Principal("ann"))
    await continue_chat(store, chat_id, [bridge.agent])
    assert refunds_done() == []
    assert [waiting.id for waiting in await store.pending_questions(chat_id)] == [question.id]
    with pytest.raises(NotAllowedError, match="2 different people"):
        await store.approve(question.id, by=Principal("ann"))
    assert await store.approve(question.id, by=Principal("bob"))
    await continue_chat(store, chat_id, [bridge.agent])
    assert len(refunds_done()) == 1
    decided = await store.question(question.id)
    assert [vote.principal for vote in decided.votes] == [Principal("ann"), Principal("bob")]


async def test_an_expired_bridged_approval_denies_the_call(store: Store) -> None:
    bridge = make_bridge(ttl=60)
    chat_id = await parked(store, bridge, "Refund order A17")
    (question,) = await store.pending_questions(chat_id)
    assert question.expires_at is not None
    advance_clock(61)
    assert await store.pending_questions(chat_id) == []
    with pytest.raises(QuestionExpiredError):
        await store.approve(question.id)
    await continue_chat(store, chat_id, [bridge.agent])
    chat = await store.load_chat(chat_id, bridge.agent.make_model(), bridge.agent.tools)
    assert chat.messages[-1].content.startswith("refund: ")
    assert "lapsed" in chat.messages[-1].content
    assert refunds_done() == []


async def test_a_finished_bridged_chat_takes_no_new_message(store: Store) -> None:
    bridge = make_bridge()
    chat_id = await parked(store, bridge, "Refund order A17")
    (question,) = await store.pending_questions(chat_id)
    assert await store.approve(question.id)
    await continue_chat(store, chat_id, [bridge.agent])
    chat = await store.load_chat(chat_id, bridge.agent.make_model(), bridge.agent.tools)
    with pytest.raises(BridgeError, match="gone on already"):
        await chat.ask("Refund it again")
    assert len(refunds_done()) == 1


async def test_a_run_that_did_not_defer_is_not_parked(store: Store) -> None:
    bridge = make_bridge()
    with pytest.raises(ValueError, match="DeferredToolRequests"):
        await bridge.park(store, await bridge.pydantic_agent.run("Hello"))


def test_each_tool_of_the_agent_has_a_stand_in() -> None:
    bridge = PydanticAIBridge(make_agent(), name="refunds", tools=["elsewhere"])
    assert [tool.name for tool in bridge.agent.tools] == ["refund", "lookup", "elsewhere"]
    assert all(isinstance(tool, StandIn) for tool in bridge.agent.tools)
    with pytest.raises(TypeError, match=r"pydantic_ai\.Agent"):
        PydanticAIBridge(object(), name="x")  # type: ignore[arg-type]
