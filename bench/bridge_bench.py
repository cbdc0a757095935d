"""The bridges' added cost per round trip: pydantic-ai's over pydantic-ai saving its own message history, the
Agents SDK's over the SDK saving its own ``RunState``, and LangGraph's over LangGraph with its own checkpointer.

Run from the repository root: ``python bench/bridge_bench.py [--postgres URL] [--rounds N] [--out FILE]``.

One pydantic-ai round trip: a run that stops on an approval, persisted; the approval; a fresh agent that
loads the run and carries it on to its final reply, persisted again. pydantic-ai alone
(``peers.PydanticAiSide``): the history saved as JSON, one row per run, and ``DeferredToolResults`` built by
hand. Through the bridge: ``bridge.park``, ``Store.approve`` and ``continue_chat`` (the question listed,
decided once and trailed; the run carried on under the chat's turn claim, its approved tool run once).
An Agents SDK round trip is the same, the SDK alone (``peers.AgentsSdkSide``) saving the ``RunState`` string,
loading, approving and running it on.

One LangGraph round trip: a thread run to its ``interrupt()`` (checkpointed); a freshly compiled graph that
reads the waiting interrupt and resumes the thread to its end. LangGraph alone: ``invoke``, ``get_state`` and
``invoke(Command(resume=...))`` on its own synchronous checkpointer (``SqliteSaver`` on a file,
``PostgresSaver`` with ``--postgres``). Through the bridge: the same first ``invoke``, then ``bridge.park``,
``Store.approve`` and ``continue_chat`` (which resumes the thread, its node's side effect through ``once``).

Both sides of a pair use the same scripted model or graph in one process, one round trip at a time,
alternating round trip by round trip.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any, TypedDict
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from peers import AgentsSdkSide, Blobs, PydanticAiSide  # noqa: E402

from tarry.bridges.langgraph import LangGraphBridge, once  # noqa: E402
from tarry.bridges.openai_agents import OpenAIAgentsBridge  # noqa: E402
from tarry.bridges.pydantic_ai import PydanticAIBridge  # noqa: E402
from tarry.jobs import continue_chat  # noqa: E402
from tarry.store import Store  # noqa: E402

Steps = list[Callable[[int], Awaitable[None]]]
"""The steps of one side's round trip ``number``, one after the other."""


@dataclass(frozen=True)
class Library:
    """One library measured: its side alone, a fresh bridge of its agent, and how a run starts."""

    name: str
    package: str
    alone: Callable[[Blobs], Any]
    bridge: Callable[[], Any]
    run: Callable[[Any], Awaitable[Any]]


async def _sdk_run(bridge: OpenAIAgentsBridge) -> Any:
    from agents import Runner

    return await Runner.run(bridge.sdk_agent, "Pay Bob 5")


LIBRARIES = [
    Library(
        "pydantic-ai", "pydantic-ai-slim", lambda blobs: PydanticAiSide("pydantic-ai", blobs),
        lambda: PydanticAIBridge(PydanticAiSide.agent(), name="payer"),
        lambda bridge: bridge.pydantic_agent.run("Pay Bob 5"),
    ),
    Library(
        "OpenAI Agents SDK", "openai-agents", lambda blobs: AgentsSdkSide("OpenAI Agents SDK", blobs),
        lambda: OpenAIAgentsBridge(AgentsSdkSide.agent(), name="payer"), _sdk_run,
    ),
]  # fmt: skip


class BridgeSide:
    """The same workload through a library's bridge: park, approve by id, carry on as a worker does."""

    def __init__(self, store: Store, library: Library) -> None:
        self.store = store
        self.library = library
        self.starter = library.bridge()
        self.chats: dict[int, str] = {}
        self.steps: Steps = [self.park, approve(store, self.chats), self.finish]

    async def park(self, number: int) -> None:
        chat = await self.starter.park(self.store, await self.library.run(self.starter))
        self.chats[number] = chat.id

    async def finish(self, number: int) -> None:
        bridge = self.library.bridge()  # a fresh agent, as a fresh process builds
        assert await continue_chat(self.store, self.chats[number], [bridge.agent]) is None


def approve(store: Store, chats: dict[int, str]) -> Callable[[int], Awaitable[None]]:
    """The step that approves the one question of round trip ``number``'s chat, found with ``pending_questions``."""

    async def step(number: int) -> None:
        (question,) = await store.pending_questions(chats[number])
        assert await store.approve(question.id)

    return step


class Payment(TypedDict, total=False):
    """The state of the LangGraph side's thread."""

    amount: int
    to: str
    said: str


def pay(state: Payment) -> Payment:
    """The one node: ask to approve the transfer, then make it (once, when tarry resumes the thread)."""
    from langgraph.types import interrupt

    answer = interrupt({"transfer": {"amount": state["amount"], "to": state["to"]}})
    if not answer["approved"]:
        return {"said": "Declined."}
    return {"said": once(lambda: f"Sent {state['amount']} to {state['to']}", interrupted=lambda message: message)}


def payment_graph(checkpointer: Any) -> Any:
    from langgraph.graph import START, StateGraph

    builder = StateGraph(Payment)
    builder.add_node("pay", pay)
    builder.add_edge(START, "pay")
    return builder.compile(checkpointer=checkpointer)


def checkpointer(place: str | Path) -> Any:
    """LangGraph's own synchronous saver: ``SqliteSaver`` on a file (WAL, ``synchronous=NORMAL``), or
    ``PostgresSaver`` at a URL (its connection in ``OPENED``)."""
    if isinstance(place, Path):
        import sqlite3

        from langgraph.checkpoint.sqlite import SqliteSaver

        connection = sqlite3.connect(place, check_same_thread=False)
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=NORMAL")
        saver: Any = SqliteSaver(connection)
    else:
        import psycopg
        from langgraph.checkpoint.postgres import PostgresSaver
        from psycopg.rows import dict_row

        link = psycopg.Connection.connect(place, autocommit=True, prepare_threshold=0, row_factory=dict_row)
        OPENED.append(link)
        saver = PostgresSaver(link)  # type: ignore[arg-type]
    saver.setup()
    return saver


OPENED: list[Any] = []
"""The PostgreSQL connections of the checkpointers, closed once a database is measured."""


class GraphSide:
    """LangGraph alone: run the thread to its interrupt; a fresh graph reads it and resumes the thread."""

    def __init__(self, place: str | Path) -> None:
        self.saver = checkpointer(place)
        self.graph = payment_graph(self.saver)
        self.run = uuid.uuid4().hex[:8]
        self.steps: Steps = [self.start, self.finish]

    def config(self, number: int) -> dict[str, Any]:
        return {"configurable": {"thread_id": f"{self.run}-{number}"}}

    async def start(self, number: int) -> None:
        result = await asyncio.to_thread(self.graph.invoke, {"amount": 5, "to": "Bob"}, self.config(number))
        assert result["__interrupt__"]

    async def finish(self, number: int) -> None:
        from langgraph.types import Command

        graph = payment_graph(self.saver)  # a fresh graph object, as a fresh process would build
        config = self.config(number)
        (pending,) = (await asyncio.to_thread(graph.get_state, config)).interrupts
        result = await asyncio.to_thread(graph.invoke, Command(resume={pending.id: {"approved": True}}), config)
        assert result["said"] == "Sent 5 to Bob", result


class GraphBridgeSide(GraphSide):
    """The same thread through the bridge: run it to its interrupt, park it, approve by id, carry on."""

    def __init__(self, place: str | Path, store: Store) -> None:
        super().__init__(place)
        self.store = store
        self.chats: dict[int, str] = {}
        self.steps = [self.start, self.park, approve(store, self.chats), self.carry]

    async def park(self, number: int) -> None:
        bridge = LangGraphBridge(self.graph, name="payer")
        chat = await bridge.park(self.store, f"{self.run}-{number}", "Pay Bob 5")
        self.chats[number] = chat.id

    async def carry(self, number: int) -> None:
        bridge = LangGraphBridge(payment_graph(self.saver), name="payer")  # as a fresh process builds
        assert await continue_chat(self.store, self.chats[number], [bridge.agent]) is None


async def timed(steps: list[Any], number: int) -> float:
    """Seconds the steps of round trip ``number`` take, one after the other."""
    began = time.perf_counter()
    for step in steps:
        await step(number)
    return time.perf_counter() - began


async def measure(where: str, sides: dict[str, Steps], rounds: int) -> dict[str, list[float]]:
    """Round-trip times of each side, interleaved round trip by round trip so load falls on all alike."""
    times: dict[str, list[float]] = {label: [] for label in sides}
    for number in range(-2, rounds):  # two warm-up rounds each, not counted
        for label, steps in sides.items() if number % 2 == 0 else reversed(sides.items()):
            took = await timed(steps, number)
            if number >= 0:
                times[label].append(took)
    print(f"{where}: measured {rounds} round trips each", file=sys.stderr)
    return times


async def measure_all(
    where: str, url: str, blobs_place: str | Path, checkpoints: tuple[str | Path, str | Path], rounds: int
) -> dict[str, list[float]]:
    """Every pair on one database: tarry's store at ``url``, the libraries' own rows at ``blobs_place``, and the
    two LangGraph sides' checkpoints at ``checkpoints`` (one each)."""
    async with AsyncExitStack() as stack:
        stack.callback(lambda: [OPENED.pop().close() for _ in list(OPENED)])
        blobs = await Blobs.open(stack, blobs_place)
        store = await stack.enter_async_context(Store(url))
        await store.setup()
        sides: dict[str, Steps] = {}
        for library in LIBRARIES:
            alone = library.alone(blobs)
            sides[f"{library.name} alone"] = [alone.park, alone.finish]
            sides[f"{library.name} through the bridge"] = BridgeSide(store, library).steps
        sides[LANGGRAPH_ALONE] = GraphSide(checkpoints[0]).steps
        sides[LANGGRAPH_BRIDGED] = GraphBridgeSide(checkpoints[1], store).steps
        return await measure(where, sides, rounds)


LANGGRAPH_ALONE, LANGGRAPH_BRIDGED = "LangGraph alone", "LangGraph through the bridge"
PAIRS = (
    *((f"{library.name} alone", f"{library.name} through the bridge") for library in LIBRARIES),
    (LANGGRAPH_ALONE, LANGGRAPH_BRIDGED),
)


def row(where: str, side: str, times: list[float], base: list[float] | None) -> str:
    median, p90 = statistics.median(times), statistics.quantiles(times, n=10)[-1] if len(times) > 1 else times[0]
    added = "" if base is None else f"{(median - statistics.median(base)) * 1000:+.1f} ms"
    return f"| {where} | {side} | {median * 1000:.1f} ms | {p90 * 1000:.1f} ms | {added} |"


def page(results: dict[str, dict[str, list[float]]], rounds: int, started: float, load: float) -> str:
    versions = ", ".join(
        f"{package} {version(package)}" for package in (*(library.package for library in LIBRARIES), "langgraph")
    )
    lines = [
        "# Benchmarks: the bridges",
        "",
        "Written by `python bench/bridge_bench.py`; the numbers below are from its last run.",
        "",
        f"Machine: {platform.platform()}, Python {platform.python_version()}, {os.cpu_count()} CPUs, load"
        f" {load:.2f} at the start (the machine was shared with other work while it ran: the medians of the two"
        " sides of a pair are comparable, since their round trips alternate, but not with other runs)."
        f" {versions}. {rounds} round"
        f" trips per row, in {time.perf_counter() - started:.0f} s.",
        "",
        "A pydantic-ai round trip: a run that stops on an approval, persisted; the approval; a fresh agent that"
        " carries the run on to its final reply, persisted. pydantic-ai alone saves its message history as JSON,"
        " one row per run (`bench/peers.py`), and builds `DeferredToolResults` by hand: no listing, no"
        " single-use decision, no trail, no claim. Through the bridge: `bridge.park`, `Store.approve` (the"
        " question found with `pending_questions`) and `continue_chat`, with all of those, and the approved"
        " tool's run marked started and finished on its call (`run_once`). An Agents SDK round trip is the same"
        " work; the SDK alone saves its `RunState` string, loads it, approves and runs on; through the bridge,"
        " the SDK runs the approved function tool inside `Runner.run`, its run marked started and finished on"
        " its call (`run_once`).",
        "",
        "A LangGraph round trip: a one-node graph run to its `interrupt()`, checkpointed; a freshly compiled graph"
        " that reads the waiting interrupt (`get_state`) and resumes the thread (`Command(resume=...)`) to its"
        " end. LangGraph alone keeps the thread in its own synchronous checkpointer (`SqliteSaver` on a file of"
        " its own, `PostgresSaver` on PostgreSQL): no listing, no single-use decision, no trail, no claim."
        " Through the bridge: the same first run and checkpointer, then `bridge.park`, `Store.approve` and"
        " `continue_chat`, which resumes the thread under the chat's turn claim; the node's side effect goes"
        " through `once` (its run marked started and finished on the interrupt's call).",
        "",
        "Same scripted model or graph, one process, one round trip at a time; all the sides alternate. On"
        ' SQLite, tarry commits with its default `durability="full"` (a disk sync per commit) while the rows of'
        " the libraries alone and LangGraph's checkpoints use WAL with `synchronous=NORMAL` (no sync per commit),"
        " as in the store benchmark.",
        "",
        "| database | | median | p90 | added per round trip |",
        "|---|---|---|---|---|",
    ]
    for where, times in results.items():
        for alone, bridged in PAIRS:
            lines.append(row(where, alone, times[alone], None))
            lines.append(row(where, bridged, times[bridged], times[alone]))
    lines += [
        "",
        "The added time is tarry's: the chat's rows written when the run parks (the chat, its messages, a call"
        " and a question per deferred call or interrupt), the decision's transaction and trail row, and carrying"
        " on (loading the chat, claiming the call and the turn, marking the tool's run started and finished,"
        " writing the results and the reply), each a transaction of its own. The pydantic-ai bridge keeps the"
        " run's whole history in the parked message, the Agents SDK bridge its `RunState`; the LangGraph bridge"
        " keeps only the thread's id, and reads the thread's state from the checkpointer when it parks and when"
        " it carries on.",
        "",
    ]
    return "\n".join(lines)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--postgres", default=os.environ.get("TARRY_TEST_POSTGRES_URL"))
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks-bridges.md"))
    arguments = parser.parse_args()
    started, load = time.perf_counter(), os.getloadavg()[0]
    from agents import set_tracing_disabled

    set_tracing_disabled(True)  # tracing would export to OpenAI over the network
    folder = Path(tempfile.mkdtemp())
    sqlite = f"sqlite:///{folder / 'tarry.db'}"
    places = (folder / "checkpoints-alone.db", folder / "checkpoints-bridged.db")
    results = {"SQLite file": await measure_all("SQLite", sqlite, folder / "runs.db", places, arguments.rounds)}
    if arguments.postgres:
        import psycopg

        schema = f"bridge_bench_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(arguments.postgres, autocommit=True) as connection:
            connection.execute(f'CREATE SCHEMA "{schema}"')
        try:
            separator = "&" if "?" in arguments.postgres else "?"
            url = f"{arguments.postgres}{separator}options={quote(f'-csearch_path={schema}')}"
            results["PostgreSQL"] = await measure_all("PostgreSQL", url, url, (url, url), arguments.rounds)
        finally:
            with psycopg.connect(arguments.postgres, autocommit=True) as connection:
                connection.execute(f'DROP SCHEMA "{schema}" CASCADE')
    Path(arguments.out).write_text(page(results, arguments.rounds, started, load))
    print(Path(arguments.out).read_text())


if __name__ == "__main__":
    asyncio.run(main())
