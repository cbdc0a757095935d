"""The OpenAI Agents SDK bridge on SQLite and PostgreSQL: a run parked, decided and carried on, in real processes.

The SDK's own ``OpenAIResponsesModel`` talks to respx at the HTTP boundary (``tests/bridges/sdk_runs.py``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import respx
from agents import RunContextWrapper, Runner, function_tool

from tarry.bridges import StandIn
from tarry.bridges.openai_agents import OpenAIAgentsBridge
from tarry.errors import BridgeError, NotAllowedError, QuestionExpiredError
from tarry.jobs import continue_chat
from tarry.principals import Principal
from tarry.store import Store
from tarry.testing import advance_clock
from tests.bridges import processes
from tests.bridges.processes import finish, start_together
from tests.bridges.runs import finished_by_a_worker, refunds_done
from tests.bridges.sdk_runs import PROMPT, make_agent, make_bridge, openai_api


@pytest.fixture(autouse=True)
def refunds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The file each run of ``refund`` appends to, in this process and the ones it starts."""
    path = tmp_path / "refunds"
    monkeypatch.setenv("TARRY_TEST_REFUNDS", str(path))
    return path


@pytest.fixture
def api() -> Iterator[respx.Route]:
    """The Responses API as respx answers it in this process; the route records the requests."""
    with openai_api() as route:
        yield route


def start(*args: str) -> subprocess.Popen[str]:
    """``python -m tests.bridges.sdk_proc ARGS`` in a real process, on this checkout's tarry."""
    return processes.start("tests.bridges.sdk_proc", *args)


async def parked(store: Store, bridge: OpenAIAgentsBridge, prompt: str = PROMPT) -> str:
    chat = await bridge.park(store, await Runner.run(bridge.sdk_agent, prompt))
    return chat.id


async def last_reply(store: Store, chat_id: str) -> str:
    bridge = make_bridge()
    chat = await store.load_chat(chat_id, bridge.agent.make_model(), bridge.agent.tools)
    return chat.messages[-1].content


async def test_parked_in_one_process_decided_in_a_second_carried_on_in_a_third(database_url: str) -> None:
    async with Store(database_url) as store:
        await store.setup()
    chat_id = str(finish(start("park", database_url))["chat"])
    async with Store(database_url) as store:
        waiting = await store.pending_questions(chat_id)
        assert sorted(question.tool_call.name for question in waiting) == ["lookup", "refund"]
    assert finish(start("decide", database_url, chat_id)) == {"approved": True, "declined": True}
    assert refunds_done() == []  # deciding runs nothing: carrying on does
    last = finish(start("carry", database_url, chat_id))
    assert last == {"last": "refund: Refunded A17 | lookup: Look it up yourself", "role": "assistant"}
    assert len(refunds_done()) == 1
    async with Store(database_url) as store:
        assert await store.pending_questions() == []
        trail = await store.history(chat_id)
        assert sorted((event.decision, event.by) for event in trail if event.outcome == "decided") == [
            ("accept", Principal("ann")),
            ("decline", Principal("ann")),
        ]


async def test_eight_processes_racing_conflicting_decisions_record_one(
    database_url: str, tmp_path: Path, api: respx.Route
) -> None:
    async with Store(database_url) as store:
        await store.setup()
        chat_id = await parked(store, make_bridge(), "Refund order A17")
        (question,) = await store.pending_questions(chat_id)
    go = tmp_path / "go"
    racers = [
        start("race", database_url, question.id, "accept" if n % 2 else "decline", f"p{n}", str(go)) for n in range(8)
    ]
    start_together(go, racers)
    winners = [outcome for outcome in (finish(racer) for racer in racers) if outcome["recorded"]]
    assert len(winners) == 1
    (winner,) = winners
    async with Store(database_url) as store:
        decided = await store.question(question.id)
        assert decided.decision == winner["decision"]
        assert decided.decided_by == Principal(str(winner["who"]))
        attempts = await store.history(chat_id)
        assert len(attempts) == 8 and [event.outcome for event in attempts].count("decided") == 1
        await continue_chat(store, chat_id, [make_bridge().agent])
        last = await last_reply(store, chat_id)
    if winner["decision"] == "accept":
        assert (last, len(refunds_done())) == ("refund: Refunded A17", 1)
    else:
        assert (last, refunds_done()) == (f"refund: declined by {winner['who']}", [])


async def test_four_processes_carrying_the_same_run_on_refund_once(
    database_url: str, tmp_path: Path, api: respx.Route
) -> None:
    async with Store(database_url) as store:
        await store.setup()
        chat_id = await parked(store, make_bridge(), "Refund order A17")
        (question,) = await store.pending_questions(chat_id)
        assert await store.approve(question.id)
    go = tmp_path / "go"
    carriers = [start("carry", database_url, chat_id, str(go)) for _ in range(4)]
    start_together(go, carriers)
    for carrier in carriers:
        finish(carrier)
    bridge = make_bridge()
    async with Store(database_url) as store:
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


async def test_a_carrier_killed_mid_tool_leaves_the_call_interrupted_not_run_again(
    database_url: str, tmp_path: Path, api: respx.Route, monkeypatch: pytest.MonkeyPatch
) -> None:
    started, go = tmp_path / "started", tmp_path / "go"
    monkeypatch.setenv("TARRY_TEST_REFUND_STARTED", str(started))
    monkeypatch.setenv("TARRY_TEST_REFUND_GO", str(go))
    async with Store(database_url) as store:
        await store.setup()
        chat_id = await parked(store, make_bridge(), "Refund order A17")
        (question,) = await store.pending_questions(chat_id)
        assert await store.approve(question.id)
    carrier = start("carry", database_url, chat_id)
    deadline = time.monotonic() + 120
    while not (started.exists() and started.read_text()):
        assert carrier.poll() is None, carrier.communicate()[1]
        assert time.monotonic() < deadline, "the carrier never reached the tool"
        time.sleep(0.02)
    carrier.send_signal(signal.SIGKILL)
    assert carrier.wait(timeout=60) == -signal.SIGKILL
    go.touch()
    advance_clock(61)  # the dead carrier's claim on the call (a 60 s lease) runs out
    async with Store(database_url) as store:
        await continue_chat(store, chat_id, [make_bridge().agent])
        last = await last_reply(store, chat_id)
    assert last.startswith("refund: The refund call was interrupted")
    assert [line.split()[1] for line in started.read_text().splitlines()] == [str(carrier.pid)]  # entered once
    assert refunds_done() == []  # killed inside the tool, before its side effect; never run again


async def test_standing_grants_on_both_calls_park_the_run_due_and_a_worker_refunds_once(
    store: Store, api: respx.Route
) -> None:
    bridge = make_bridge()
    for tool in ("refund", "lookup"):
        await store.grant(tool, by="ops-ada", agent="refunds")
    chat_id = await parked(store, bridge)  # both calls approved as it parked: park() does not raise
    assert await store.pending_questions(chat_id) == []
    assert refunds_done() == []  # approved, not run: parking never runs the foreign run on
    chat = await finished_by_a_worker(store, chat_id, bridge.agent)
    assert chat.messages[-1].content == "refund: Refunded A17 | lookup: INV-of-A17"
    assert len(refunds_done()) == 1
    decided = [event for event in await store.history(chat_id) if event.outcome == "decided"]
    assert sorted(event.channel for event in decided) == ["grant", "grant"]


async def test_the_approved_tool_gets_the_runs_context(store: Store, api: respx.Route) -> None:
    seen: list[object] = []

    @function_tool(needs_approval=True)
    def refund(context: RunContextWrapper[dict[str, str]], order: str) -> str:
        """Refund an order, as the run's context says."""
        seen.append(context.context)
        return f"Refunded {order}"

    agent = make_agent().clone(tools=[refund])
    bridge = OpenAIAgentsBridge(agent, name="refunds")
    run = await Runner.run(agent, "Refund order A17", context={"desk": "ops"})
    chat = await bridge.park(store, run)
    (question,) = await store.pending_questions(chat.id)
    assert await store.approve(question.id)
    assert seen == []  # approving runs nothing
    assert await continue_chat(store, chat.id, [bridge.agent]) is None
    assert seen == [{"desk": "ops"}]
    assert await last_reply(store, chat.id) == "refund: Refunded A17"


async def test_an_approved_tool_that_returns_nothing_runs_once(store: Store, api: respx.Route) -> None:
    ran: list[str] = []

    @function_tool(needs_approval=True)
    def refund(order: str) -> None:
        """Refund an order, saying nothing."""
        ran.append(order)

    bridge = OpenAIAgentsBridge(make_agent().clone(tools=[refund]), name="refunds")
    chat_id = await parked(store, bridge, "Refund order A17")
    (question,) = await store.pending_questions(chat_id)
    assert await store.approve(question.id)
    assert await continue_chat(store, chat_id, [bridge.agent]) is None
    assert ran == ["A17"]
    assert (await last_reply(store, chat_id)).startswith("refund: ")


async def test_a_declines_note_reaches_the_model_as_the_calls_output(store: Store, api: respx.Route) -> None:
    bridge = make_bridge()
    chat_id = await parked(store, bridge)
    waiting = {question.tool_call.name: question for question in await store.pending_questions(chat_id)}
    assert await store.decline(waiting["refund"].id, "A17 was refunded last week")
    assert await store.respond(waiting["lookup"].id, {"invoice": "INV-9"}) is not None
    assert await continue_chat(store, chat_id, [bridge.agent]) is None
    sent = json.loads(api.calls[-1].request.content)["input"]
    outputs = {item["call_id"]: item["output"] for item in sent if item.get("type") == "function_call_output"}
    assert outputs == {
        waiting["refund"].tool_call.id: "A17 was refunded last week",
        waiting["lookup"].tool_call.id: '{"invoice": "INV-9"}',
    }
    assert await last_reply(store, chat_id) == 'refund: A17 was refunded last week | lookup: {"invoice": "INV-9"}'
    assert refunds_done() == []


async def test_two_people_must_approve_a_bridged_call(store: Store, api: respx.Route) -> None:
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


async def test_an_expired_bridged_approval_rejects_the_call(store: Store, api: respx.Route) -> None:
    bridge = make_bridge(ttl=60)
    chat_id = await parked(store, bridge, "Refund order A17")
    (question,) = await store.pending_questions(chat_id)
    assert question.expires_at is not None
    advance_clock(61)
    assert await store.pending_questions(chat_id) == []
    with pytest.raises(QuestionExpiredError):
        await store.approve(question.id)
    await continue_chat(store, chat_id, [bridge.agent])
    last = await last_reply(store, chat_id)
    assert last.startswith("refund: ") and "lapsed" in last
    assert refunds_done() == []


async def test_a_finished_bridged_chat_takes_no_new_message(store: Store, api: respx.Route) -> None:
    bridge = make_bridge()
    chat_id = await parked(store, bridge, "Refund order A17")
    (question,) = await store.pending_questions(chat_id)
    assert await store.approve(question.id)
    await continue_chat(store, chat_id, [bridge.agent])
    chat = await store.load_chat(chat_id, bridge.agent.make_model(), bridge.agent.tools)
    with pytest.raises(BridgeError, match="gone on already"):
        await chat.ask("Refund it again")
    assert len(refunds_done()) == 1


async def test_a_run_that_was_not_interrupted_is_not_parked(store: Store, api: respx.Route) -> None:
    bridge = make_bridge()
    with pytest.raises(ValueError, match="interruptions"):
        await bridge.park(store, await Runner.run(bridge.sdk_agent, "Hello"))


def test_each_function_tool_of_the_agent_has_a_stand_in() -> None:
    bridge = OpenAIAgentsBridge(make_agent(), name="refunds", tools=["elsewhere"])
    assert [tool.name for tool in bridge.agent.tools] == ["refund", "lookup", "elsewhere"]
    assert all(isinstance(tool, StandIn) for tool in bridge.agent.tools)
    with pytest.raises(TypeError, match=r"agents\.Agent"):
        OpenAIAgentsBridge(object(), name="x")  # type: ignore[arg-type]
