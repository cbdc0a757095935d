"""Bridged runs in the inbox, on SQLite and PostgreSQL: the conversation page shows the run's transcript as its
library holds it, ``tarry show`` prints it, the JSON API decides an Agents SDK run, a standing grant approves a
bridged call."""

from __future__ import annotations

import asyncio
import html
import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agents import Runner
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.types import interrupt

from tarry.bridges.langgraph import LangGraphBridge
from tarry.jobs import continue_chat
from tarry.principals import Principal
from tarry.store import Store
from tests.bridges import processes, runs, sdk_runs
from tests.bridges.graphs import OPENED, make_bridge, start_run
from tests.bridges.processes import finish
from tests.web.client import AUTH, Inbox

STEP = re.compile(r'<li class="step step-([a-z]+)">.*?<span class="step-text">(.*?)</span></li>', re.S)
CONTENT = re.compile(r'<div class="content">(.*?)</div>', re.S)


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


def conversation(database_url: str, chat_id: str) -> tuple[list[tuple[str, str]], list[str]]:
    """The run's steps the chat's conversation page shows (role, text), and its messages' texts."""
    inbox = Inbox(database_url)
    with inbox.client:
        shown = inbox.client.get(f"/chats/{chat_id}", headers=AUTH)
        inbox.client.portal.call(inbox.store.close)  # type: ignore[union-attr]
    assert shown.status_code == 200, shown.text
    steps = [(role, html.unescape(text)) for role, text in STEP.findall(shown.text)]
    return steps, [html.unescape(text) for text in CONTENT.findall(shown.text)]


def tarry_show(database_url: str, chat_id: str) -> dict[str, Any]:
    """What ``tarry show CHAT --json`` prints, run in a process of its own."""
    process = processes.start("tarry.cli", "show", chat_id, "--json", "--url", database_url)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    shown: dict[str, Any] = json.loads(out)
    return shown


async def test_a_parked_pydantic_ai_run_shows_its_message_history(database_url: str) -> None:
    bridge = runs.make_bridge()
    async with Store(database_url) as store:
        await store.setup()
        chat = await bridge.park(store, await bridge.pydantic_agent.run(runs.PROMPT))
        calls = [("call", 'refund({"order":"A17"})'), ("call", 'lookup({"invoice_of":"A17"})')]
        assert await asyncio.to_thread(conversation, database_url, chat.id) == (calls, [runs.PROMPT])
        waiting = {question.tool_call.name: question for question in await store.pending_questions(chat.id)}
        assert await store.approve(waiting["refund"].id)
        assert await store.respond(waiting["lookup"].id, "INV-9") is not None
        await continue_chat(store, chat.id, [bridge.agent])
    steps, texts = await asyncio.to_thread(conversation, database_url, chat.id)
    # Each step once: the second message's history goes on from the first's; its last text is the reply itself.
    assert steps == [*calls, ("result", "refund: Refunded A17"), ("result", "lookup: INV-9")]
    assert texts == [runs.PROMPT, "refund: Refunded A17 | lookup: INV-9"]
    shown = await asyncio.to_thread(tarry_show, database_url, chat.id)
    parked = shown["transcript"][1]["run_transcript"]
    assert parked == [{"role": "user", "text": runs.PROMPT}, *({"role": r, "text": t} for r, t in calls)]


async def test_a_parked_agents_sdk_run_shows_its_items(database_url: str) -> None:
    bridge = sdk_runs.make_bridge()
    async with Store(database_url) as store:
        await store.setup()
        with sdk_runs.openai_api():
            chat = await bridge.park(store, await Runner.run(bridge.sdk_agent, sdk_runs.PROMPT))
        calls = [("call", 'refund({"order": "A17"})'), ("call", 'lookup({"invoice_of": "A17"})')]
        assert await asyncio.to_thread(conversation, database_url, chat.id) == (calls, [sdk_runs.PROMPT])
        waiting = {question.tool_call.name: question for question in await store.pending_questions(chat.id)}
        assert await store.approve(waiting["refund"].id)
        assert await store.decline(waiting["lookup"].id, "Look it up yourself")
        with sdk_runs.openai_api():
            await continue_chat(store, chat.id, [bridge.agent])
    steps, texts = await asyncio.to_thread(conversation, database_url, chat.id)
    assert steps == [*calls, ("result", "refund: Refunded A17"), ("result", "lookup: Look it up yourself")]
    assert texts == [sdk_runs.PROMPT, "refund: Refunded A17 | lookup: Look it up yourself"]


async def test_a_parked_graph_run_shows_its_state(database_url: str, tmp_path: Path) -> None:
    checkpoints = f"sqlite:///{tmp_path / 'checkpoints.db'}" if database_url.startswith("sqlite") else database_url
    bridge = make_bridge(checkpoints)
    thread_id = uuid.uuid4().hex
    await asyncio.to_thread(start_run, bridge, thread_id, with_invoice=False)
    async with Store(database_url) as store:
        await store.setup()
        chat = await bridge.park(store, thread_id, "Refund order A17")
        state = ("state", '{"order": "A17", "said": [], "with_invoice": false}')
        assert await asyncio.to_thread(conversation, database_url, chat.id) == ([state], ["Refund order A17"])
        (question,) = await store.pending_questions(chat.id)
        assert await store.approve(question.id)
        await continue_chat(store, chat.id, [bridge.agent])
    steps, texts = await asyncio.to_thread(conversation, database_url, chat.id)
    final = '{"order": "A17", "said": ["refunded A17"], "with_invoice": false}'
    assert steps == [state] and texts == ["Refund order A17", final]  # the final state is the reply, told once


def agent_node(state: MessagesState) -> dict[str, Any]:
    call = {"name": "refund", "args": {"order": "A17"}, "id": "call-1"}
    return {"messages": [AIMessage(content="I will refund A17.", tool_calls=[call])]}


def refund_node(state: MessagesState) -> dict[str, Any]:
    answer: dict[str, Any] = interrupt({"refund": "A17"})
    done = "Refunded A17" if answer.get("approved") else "Not refunded"
    return {"messages": [ToolMessage(content=done, tool_call_id="call-1", name="refund")]}


async def test_a_parked_graph_run_whose_state_holds_messages_shows_them(store: Store, database_url: str) -> None:
    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent_node)
    builder.add_node("refund", refund_node)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", "refund")
    bridge = LangGraphBridge(builder.compile(checkpointer=InMemorySaver()), name="chatty")
    config = {"configurable": {"thread_id": "t1"}}
    await asyncio.to_thread(bridge.graph.invoke, {"messages": [HumanMessage("Refund order A17")]}, config)
    chat = await bridge.park(store, "t1", "Refund order A17")
    said = [("assistant", "I will refund A17."), ("call", 'refund({"order": "A17"})')]
    assert (await asyncio.to_thread(conversation, database_url, chat.id))[0] == said
    (question,) = await store.pending_questions(chat.id)
    assert await store.approve(question.id)
    await continue_chat(store, chat.id, [bridge.agent])
    steps, _ = await asyncio.to_thread(conversation, database_url, chat.id)
    assert steps == [*said, ("result", "refund: Refunded A17")]


async def test_a_standing_grant_approves_a_bridged_call_on_the_trail(database_url: str) -> None:
    bridge = runs.make_bridge()
    async with Store(database_url) as store:
        await store.setup()
        grant = await store.grant("refund", by="ops-ada", agent="refunds")
        chat = await bridge.park(store, await bridge.pydantic_agent.run(runs.PROMPT))
        (lookup,) = await store.pending_questions(chat.id)  # the refund was approved as it parked
        assert lookup.tool_call is not None and lookup.tool_call.name == "lookup"
        (event,) = await store.history(chat.id)
        assert (event.outcome, event.channel, event.detail) == ("decided", "grant", f"grant {grant.id}")
        assert event.by == Principal("ops-ada")
        assert runs.refunds_done() == []  # approved, not run: carrying on runs it
        assert await store.respond(lookup.id, "INV-9") is not None
        await continue_chat(store, chat.id, [bridge.agent])
        chat = await store.load_chat(chat.id, bridge.agent.make_model(), bridge.agent.tools)
        assert chat.messages[-1].content == "refund: Refunded A17 | lookup: INV-9"
    assert len(runs.refunds_done()) == 1


def test_the_json_api_lists_and_decides_a_parked_agents_sdk_run(database_url: str) -> None:
    with Store(database_url) as store:
        store.setup_sync()
    chat_id = str(finish(processes.start("tests.bridges.sdk_proc", "park", database_url))["chat"])
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
        approved = inbox.client.post(f"/api/questions/{waiting['lookup']['id']}/approve", headers=AUTH)
        assert approved.json()["recorded"] is True
        assert inbox.client.get("/api/questions", params={"chat_id": chat_id}, headers=AUTH).json() == []
        inbox.client.portal.call(inbox.store.close)  # type: ignore[union-attr]
    last = finish(processes.start("tests.bridges.sdk_proc", "carry", database_url, chat_id))
    assert last == {"last": "refund: Refunded by phone | lookup: INV-of-A17", "role": "assistant"}
    assert runs.refunds_done() == []
