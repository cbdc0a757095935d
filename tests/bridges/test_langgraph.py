"""The LangGraph bridge on SQLite and PostgreSQL (tarry's store and LangGraph's own checkpointer, on the same
kind of database): a graph run stopped at interrupt(), parked, decided and resumed, in real processes."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.pregel import Pregel
from langgraph.types import Command, interrupt

from tarry.bridges import StandIn
from tarry.bridges.langgraph import InterruptStandIn, LangGraphBridge, form_fields, once
from tarry.errors import BridgeError, NotAllowedError
from tarry.jobs import continue_chat
from tarry.principals import Principal
from tarry.store import Store
from tarry.tasks import Task
from tarry.testing import advance_clock
from tests.bridges import processes
from tests.bridges.graphs import (
    ENTERED,
    INVOICE_SCHEMA,
    OPENED,
    Refund,
    make_bridge,
    make_graph,
    refund,
    refunds_done,
    said,
    start_run,
)
from tests.bridges.hang import hang_at, kill_when_hung
from tests.bridges.processes import finish, start_together

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def refunds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The file each refund appends to, in this process and the ones it starts."""
    path = tmp_path / "refunds"
    monkeypatch.setenv("TARRY_TEST_REFUNDS", str(path))
    return path


@pytest.fixture(autouse=True)
def closed_savers() -> Iterator[None]:
    """Close the PostgreSQL connections the test's checkpointers opened in this process."""
    yield
    while OPENED:
        OPENED.pop().close()


@pytest.fixture
def checkpoints(database_url: str, tmp_path: Path) -> str:
    """LangGraph's checkpointer: a SQLite file of its own beside tarry's, or tarry's PostgreSQL schema."""
    return f"sqlite:///{tmp_path / 'checkpoints.db'}" if database_url.startswith("sqlite") else database_url


def start(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """``python -m tests.bridges.graph_proc ARGS`` in a real process, on this checkout's tarry (with ``env`` added)."""
    return processes.start("tests.bridges.graph_proc", *args, env=env)


async def parked(store: Store, bridge: LangGraphBridge, *, with_invoice: bool = True) -> str:
    thread_id = uuid.uuid4().hex
    await asyncio.to_thread(start_run, bridge, thread_id, with_invoice=with_invoice)
    chat = await bridge.park(store, thread_id, "Refund order A17")
    return chat.id


async def approved_refund(database_url: str, checkpoints: str) -> str:
    """The id of a new chat whose thread's one refund interrupt was approved."""
    async with Store(database_url) as store:
        await store.setup()
        chat_id = await parked(store, make_bridge(checkpoints), with_invoice=False)
        (question,) = await store.pending_questions(chat_id)
        assert await store.approve(question.id)
    return chat_id


async def last_reply(store: Store, bridge: LangGraphBridge, chat_id: str) -> str:
    chat = await store.load_chat(chat_id, bridge.agent.make_model(), bridge.agent.tools)
    assert chat.messages[-1].role == "assistant" and not chat.messages[-1].tool_calls
    return chat.messages[-1].content


async def test_parked_in_one_process_decided_in_a_second_resumed_in_a_third(
    database_url: str, checkpoints: str
) -> None:
    async with Store(database_url) as store:
        await store.setup()
    chat_id = str(finish(start("park", database_url, checkpoints, uuid.uuid4().hex))["chat"])
    async with Store(database_url) as store:
        waiting = {question.tool_call.name: question for question in await store.pending_questions(chat_id)}
    assert sorted(waiting) == ["invoice", "refund"]
    assert waiting["refund"].tool_call.arguments == {"refund": "A17"}
    assert waiting["invoice"].tool_call.arguments == {
        "question": "The invoice of A17?",
        "response_schema": INVOICE_SCHEMA,
    }
    assert waiting["refund"].kind == "approval" and waiting["invoice"].kind == "form"
    assert [field.name for field in waiting["invoice"].fields] == ["invoice"]
    assert waiting["invoice"].message == "The invoice of A17?"
    assert finish(start("decide", database_url, chat_id)) == {"approved": True, "answered": True}
    assert refunds_done() == []  # deciding runs nothing: resuming does
    last = finish(start("carry", database_url, checkpoints, chat_id))
    assert last["role"] == "assistant"
    assert said(str(last["last"])) == ["invoice: {'invoice': 'INV-9'}", "refunded A17"]
    assert len(refunds_done()) == 1
    async with Store(database_url) as store:
        assert await store.pending_questions() == []
        trail = await store.history(chat_id)
        assert sorted((event.decision, event.by) for event in trail if event.outcome == "decided") == [
            ("accept", Principal("ann")),
            ("accept", Principal("ann")),
        ]


async def test_eight_processes_racing_conflicting_decisions_record_one(
    database_url: str, checkpoints: str, tmp_path: Path
) -> None:
    async with Store(database_url) as store:
        await store.setup()
        chat_id = await parked(store, make_bridge(checkpoints), with_invoice=False)
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
        bridge = make_bridge(checkpoints)
        await continue_chat(store, chat_id, [bridge.agent])
        reply = await last_reply(store, bridge, chat_id)
    if winner["decision"] == "accept":
        assert said(reply) == ["refunded A17"] and len(refunds_done()) == 1
    else:
        assert said(reply) == [f"not refunded: declined by {winner['who']}"] and refunds_done() == []


async def test_four_processes_resuming_the_same_run_refund_once(
    database_url: str, checkpoints: str, tmp_path: Path
) -> None:
    chat_id = await approved_refund(database_url, checkpoints)
    go = tmp_path / "go"
    carriers = [start("carry", database_url, checkpoints, chat_id, str(go)) for _ in range(4)]
    start_together(go, carriers)
    for carrier in carriers:
        finish(carrier)
    async with Store(database_url) as store:
        bridge = make_bridge(checkpoints)
        deadline = time.monotonic() + 60
        while True:  # a carrier that found the turn held leaves the chat due: carry it on until it is done
            chat = await store.load_chat(chat_id, bridge.agent.make_model(), bridge.agent.tools)
            if chat.messages[-1].role == "assistant" and not chat.messages[-1].tool_calls:
                break
            assert time.monotonic() < deadline, "the chat was never carried to its end"
            await continue_chat(store, chat_id, [bridge.agent])
    assert said(chat.messages[-1].content) == ["refunded A17"]
    assert len(refunds_done()) == 1
    assert refunds_done()[0].split()[1] != str(os.getpid())  # one of the four resumed it
    assert [message.role for message in chat.messages] == ["user", "assistant", "tool", "assistant"]


async def test_a_process_killed_inside_the_resumed_node_leaves_its_refund_made_once(
    database_url: str, checkpoints: str, tmp_path: Path
) -> None:
    """SIGKILL while the refund node's side effect runs, before LangGraph checkpointed the node: the next process
    resumes the thread, LangGraph runs the node again from its start, and ``once`` does not make the refund again:
    the node is told it was interrupted."""
    chat_id = await approved_refund(database_url, checkpoints)
    mark = tmp_path / "hanging"
    kill_when_hung(start("carry", database_url, checkpoints, chat_id, "", "2", env=hang_at("refund", mark)), mark)
    assert len(refunds_done()) == 1
    last = finish(start("resume_to_the_end", database_url, checkpoints, chat_id, "2"))
    assert len(refunds_done()) == 1  # not made again
    assert said(str(last["last"])) == [
        "The refund call was interrupted: the process running it stopped before it recorded a result, "
        "so whether the tool finished is not known."
    ]
    assert last["roles"] == ["user", "assistant", "tool", "assistant"]


async def test_a_decline_reaches_the_graph_and_the_refund_is_not_made(store: Store, checkpoints: str) -> None:
    bridge = make_bridge(checkpoints)
    chat_id = await parked(store, bridge)
    waiting = {question.tool_call.name: question for question in await store.pending_questions(chat_id)}
    assert await store.decline(waiting["refund"].id, "A17 was refunded last week")
    assert await store.decline(waiting["invoice"].id, "No invoice yet")
    assert await continue_chat(store, chat_id, [bridge.agent]) is None
    (invoice, refunded) = said(await last_reply(store, bridge, chat_id))
    assert refunded == "not refunded: A17 was refunded last week"
    assert invoice.startswith("invoice: {'approved': False, 'note': ") and "No invoice yet" in invoice
    assert refunds_done() == []


async def test_an_expired_interrupt_or_form_resumes_as_declined(store: Store, checkpoints: str) -> None:
    bridge = LangGraphBridge(make_graph(checkpoints), name="refunds", approval_ttl=60)
    chat_id = await parked(store, bridge)
    assert all(question.expires_at is not None for question in await store.pending_questions(chat_id))
    advance_clock(61)
    assert await store.pending_questions(chat_id) == []
    await continue_chat(store, chat_id, [bridge.agent])
    (invoice, refunded) = said(await last_reply(store, bridge, chat_id))
    assert refunded.startswith("not refunded: ") and "lapsed" in refunded
    assert invoice.startswith("invoice: {'approved': False, 'note': ") and "lapsed" in invoice
    assert refunds_done() == []


async def test_two_people_must_approve_an_interrupt(store: Store, checkpoints: str) -> None:
    bridge = make_bridge(checkpoints, two_people=True)
    chat_id = await parked(store, bridge, with_invoice=False)
    (question,) = await store.pending_questions(chat_id)
    assert await store.approve(question.id, by=Principal("ann"))
    await continue_chat(store, chat_id, [bridge.agent])
    assert refunds_done() == []
    with pytest.raises(NotAllowedError, match="2 different people"):
        await store.approve(question.id, by=Principal("ann"))
    assert await store.approve(question.id, by=Principal("bob"))
    await continue_chat(store, chat_id, [bridge.agent])
    assert len(refunds_done()) == 1


async def test_a_thread_resumed_already_is_read_not_resumed_again(store: Store, checkpoints: str) -> None:
    bridge = LangGraphBridge(twice(checkpoints), name="twice")
    chat_id = await parked(store, bridge)
    (question,) = await store.pending_questions(chat_id)
    assert await store.approve(question.id)
    # A process that resumed the thread and died before its turn was saved: the graph went on to "confirm".
    config: RunnableConfig = {"configurable": {"thread_id": await thread_of(store, bridge, chat_id)}}
    await asyncio.to_thread(bridge.graph.invoke, Command(resume={question.tool_call.id: {"approved": True}}), config)
    assert len(refunds_done()) == 1
    entered = len(ENTERED)
    await continue_chat(store, chat_id, [bridge.agent])
    assert len(ENTERED) == entered  # no node ran again: the thread was read
    (confirm,) = await store.pending_questions(chat_id)
    assert confirm.tool_call.name == "confirm" and confirm.tool_call.id != question.tool_call.id
    assert len(refunds_done()) == 1


async def thread_of(store: Store, bridge: LangGraphBridge, chat_id: str) -> str:
    chat = await store.load_chat(chat_id, bridge.agent.make_model(), bridge.agent.tools)
    data = chat.messages[1].provider_data
    assert data is not None
    return str(data["langgraph"]["thread_id"])


def twice(checkpoints: str) -> Pregel[Any, Any, Any, Any]:
    """A graph that asks to refund, then to confirm (the same node run again), one after the other."""
    builder = StateGraph(Refund)
    builder.add_node("refund", refund)
    builder.add_node("confirm", refund)
    builder.add_edge(START, "refund")
    builder.add_edge("refund", "confirm")
    return builder.compile(checkpointer=make_graph(checkpoints).checkpointer)


async def test_an_interrupt_in_the_resumed_run_parks_again(store: Store, checkpoints: str) -> None:
    bridge = LangGraphBridge(twice(checkpoints), name="twice")
    chat_id = await parked(store, bridge)
    (first,) = await store.pending_questions(chat_id)
    assert first.tool_call.name == "refund"
    assert await store.approve(first.id)
    await continue_chat(store, chat_id, [bridge.agent])
    (second,) = await store.pending_questions(chat_id)
    assert second.tool_call.name == "confirm"
    assert await store.decline(second.id, "once is enough")
    await continue_chat(store, chat_id, [bridge.agent])
    assert said(await last_reply(store, bridge, chat_id)) == ["not refunded: once is enough", "refunded A17"]
    assert len(refunds_done()) == 1
    chat = await store.load_chat(chat_id, bridge.agent.make_model(), bridge.agent.tools)
    with pytest.raises(BridgeError, match="gone on already"):
        await chat.ask("Refund it again")


async def test_a_node_that_runs_two_side_effects_through_once_is_refused(store: Store) -> None:
    made: list[str] = []

    def two_effects(state: Refund) -> Refund:
        interrupt({"refund": state["order"]})
        first = once(lambda: made.append("first") or "first", interrupted=str)
        second = once(lambda: made.append("second") or "second", interrupted=str)
        return {"said": [first, second]}

    builder = StateGraph(Refund)
    builder.add_node("refund", two_effects)
    builder.add_edge(START, "refund")
    bridge = LangGraphBridge(builder.compile(checkpointer=InMemorySaver()), name="two")
    chat_id = await parked(store, bridge, with_invoice=False)
    (question,) = await store.pending_questions(chat_id)
    assert await store.approve(question.id)
    with pytest.raises(BridgeError, match="one side effect per node"):
        await continue_chat(store, chat_id, [bridge.agent])
    assert made == ["first"]


async def test_a_thread_that_waits_on_nothing_is_not_parked(store: Store, checkpoints: str) -> None:
    bridge = make_bridge(checkpoints)
    with pytest.raises(ValueError, match="waits on none"):
        await bridge.park(store, uuid.uuid4().hex)
    with pytest.raises(ValueError, match="thread_id"):
        await bridge.park(store, "")


async def test_a_respond_gives_an_interrupt_its_resume_value(store: Store, checkpoints: str) -> None:
    bridge = make_bridge(checkpoints)
    chat_id = await parked(store, bridge)
    waiting = {question.tool_call.name: question for question in await store.pending_questions(chat_id)}
    assert await store.respond(waiting["refund"].id, {"approved": False, "note": "refunded by phone"}) is not None
    assert await store.answer(waiting["invoice"].id, invoice="INV-7")
    await continue_chat(store, chat_id, [bridge.agent])
    assert said(await last_reply(store, bridge, chat_id)) == [
        "invoice: {'invoice': 'INV-7'}",
        "not refunded: refunded by phone",
    ]
    assert refunds_done() == []


def test_a_schema_tarry_can_show_is_a_form() -> None:
    assert [field.name for field in form_fields({"response_schema": INVOICE_SCHEMA})] == ["invoice"]
    assert form_fields({"response_schema": {"type": "string"}}) == ()
    assert form_fields({"response_schema": {"type": "object", "properties": {"x": {"type": "frob"}}}}) == ()
    assert form_fields({"refund": "A17"}) == ()


async def test_a_form_interrupt_asks_its_fields_even_one_named_url() -> None:
    schema = {"type": "object", "properties": {"url": {"type": "string"}, "ttl": {"type": "integer"}}}
    task = await InterruptStandIn("fetch").execute(question="Where from?", response_schema=schema)
    assert isinstance(task, Task)
    (question,) = task.questions
    assert question.kind == "form" and question.message == "Where from?"
    assert [field.name for field in question.fields] == ["url", "ttl"]
    assert await InterruptStandIn("fetch").execute(value="go") == {"approved": True}


def test_each_node_of_the_graph_has_a_stand_in(tmp_path: Path) -> None:
    bridge = LangGraphBridge(make_graph(f"sqlite:///{tmp_path / 'c.db'}"), name="refunds", nodes=["inner"])
    assert [tool.name for tool in bridge.agent.tools] == ["refund", "invoice", "inner"]
    assert all(isinstance(tool, StandIn) for tool in bridge.agent.tools)
    with pytest.raises(TypeError, match="compiled LangGraph graph"):
        LangGraphBridge(object(), name="x")  # type: ignore[arg-type]
    builder = StateGraph(Refund)
    builder.add_node("refund", refund)
    builder.add_edge(START, "refund")
    with pytest.raises(ValueError, match="checkpointer"):
        LangGraphBridge(builder.compile(), name="x")
    assert LangGraphBridge(builder.compile(checkpointer=InMemorySaver()), name="x").agent.name == "x"
