"""Store benchmarks: latency per chat (beside the peers), writes per step, listing at scale, answers per second.

The measurements; bench/report.py runs them and writes docs/benchmarks.md (``python bench/store_bench.py``
does the same). LangGraph and the peers of bench/peers.py are imported only when they are installed;
without them the page says so and shows tarry alone.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import importlib.util
import json
import operator
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AsyncExitStack, contextmanager
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Annotated, Any, Protocol, TypedDict

from peers import PEERS, VERSIONS, peer_sides
from sqlalchemy import Connection, event, func, insert, select, text

from tarry import Message, Tool
from tarry.store import Store
from tarry.store.engine import Durability, database_url
from tarry.store.tables import chats, messages, questions, tool_calls
from tarry.testing import ScriptedModel

ROOT = Path(__file__).resolve().parents[1]


class Transfer(Tool):
    """Moves money; needs approval."""

    requires_approval = True

    def execute(self, amount: int, to: str) -> str:
        return f"Sent {amount} to {to}"


class Lookup(Tool):
    """Looks something up."""

    def execute(self, query: str) -> str:
        return f"Found {query}"


def transfer_model() -> ScriptedModel:
    def turn(history: list[Message]) -> Any:
        if history[-1].role == "user":
            return [{"name": "transfer", "arguments": {"amount": 5, "to": "Bob"}}]
        return "Done."

    return ScriptedModel([turn] * 10)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


class Counter:
    """Counts statements, transactions (not statements alone, which commit by themselves) and the bytes of
    parameters the engine sends in write statements."""

    def __init__(self, store: Store) -> None:
        self.statements = 0
        self.write_bytes = 0
        self.transactions = 0
        self.commits = 0
        event.listen(store.db.sync_engine, "before_cursor_execute", self._seen)
        event.listen(store.db.sync_engine, "begin", self._began)

    def _began(self, conn: Any) -> None:
        if getattr(conn.connection.driver_connection, "autocommit", None) is not True:  # statements alone are none
            self.transactions += 1

    def _seen(self, conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> None:
        if statement.startswith(("BEGIN", "COMMIT", "PRAGMA")):
            self.commits += statement.startswith("BEGIN IMMEDIATE")  # SQLite's write transactions
            return
        self.statements += 1
        if statement.lstrip().upper().startswith(("INSERT", "UPDATE")):
            self.write_bytes += len(repr(parameters).encode())

    @contextmanager
    def measure(self) -> Iterator[dict[str, int]]:
        before = (self.statements, self.write_bytes, self.transactions, self.commits)
        figures: dict[str, int] = {}
        yield figures
        figures["statements"] = self.statements - before[0]
        figures["write_bytes"] = self.write_bytes - before[1]
        figures["transactions"] = self.transactions - before[2]
        figures["commits"] = self.commits - before[3]


class Side(Protocol):
    """One library's way through the latency workload: park chat ``number``, later carry it on to the end."""

    label: str

    async def park(self, number: int) -> None: ...

    async def finish(self, number: int) -> None: ...


class TarrySide:
    """start_chat (create_chat + ask, in one write fewer) until the approval parks it; then load_chat in a fresh
    chat object and complete(approve=[question])."""

    def __init__(self, label: str, store: Store) -> None:
        self.label = label
        self.store = store
        self.ids: list[str] = []

    async def park(self, number: int) -> None:
        chat = await self.store.start_chat("Pay Bob 5", transfer_model(), [Transfer()])
        assert chat.waiting
        self.ids.append(chat.id)

    async def finish(self, number: int) -> None:
        chat = await self.store.load_chat(self.ids[number], transfer_model(), [Transfer()])
        (question,) = await chat.pending_questions()
        reply = await chat.complete(approve=[question])
        assert reply is not None and reply.content == "Done."


class DecidedElsewhereSide(TarrySide):
    """As ``TarrySide``, but the decision comes from elsewhere, as a second process makes it: the question listed
    from the store and approved there (``store.approve``), then the chat loaded and ``complete()``."""

    async def finish(self, number: int) -> None:
        (question,) = await self.store.pending_questions(chat_id=self.ids[number])
        await self.store.approve(question.id)
        chat = await self.store.load_chat(self.ids[number], transfer_model(), [Transfer()])
        reply = await chat.complete()
        assert reply is not None and reply.content == "Done."


class GraphState(TypedDict):
    messages: Annotated[list[dict[str, Any]], operator.add]


def graph_model(state: GraphState) -> dict[str, list[dict[str, Any]]]:
    """The scripted model of ``transfer_model()`` as a plain function node: no LLM, no LangChain messages."""
    if state["messages"][-1]["role"] == "user":
        call = {"id": "call-1", "name": "transfer", "arguments": {"amount": 5, "to": "Bob"}}
        return {"messages": [{"role": "assistant", "tool_calls": [call]}]}
    return {"messages": [{"role": "assistant", "content": "Done."}]}


def graph_tools(state: GraphState) -> dict[str, list[dict[str, Any]]]:
    """Asks for approval with ``interrupt()`` first, then runs the same ``Transfer`` tool as tarry."""
    from langgraph.types import interrupt

    call = state["messages"][-1]["tool_calls"][0]
    decision = interrupt({"kind": "approval", "tool_call": call})
    content = Transfer().execute(**call["arguments"]) if decision["approved"] else "Declined."
    return {"messages": [{"role": "tool", "tool_call_id": call["id"], "content": content}]}


def graph_route(state: GraphState) -> str:
    return "tools" if state["messages"][-1].get("tool_calls") else "__end__"


def graph_lookup(state: GraphState) -> dict[str, list[dict[str, Any]]]:
    """Runs ``Lookup`` on the model's call, with no approval: the step of :func:`writes_per_step`."""
    call = state["messages"][-1]["tool_calls"][0]
    return {"messages": [{"role": "tool", "tool_call_id": call["id"], "content": Lookup().execute("x")}]}


def compile_graph(checkpointer: Any, tools: Any = graph_tools) -> Any:
    from langgraph.graph import END, START, StateGraph

    builder = StateGraph(GraphState)
    builder.add_node("model", graph_model)
    builder.add_node("tools", tools)
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", graph_route, ["tools", END])
    builder.add_edge("tools", "model")
    return builder.compile(checkpointer=checkpointer)


class LangGraphSide:
    """invoke until ``interrupt()`` (persisted); then a freshly compiled graph reads the interrupt and resumes."""

    def __init__(self, label: str, checkpointer: Any, durability: str | None) -> None:
        self.label = label
        self.checkpointer = checkpointer
        self.durability = durability  # None: LangGraph's default ("async")
        self.graph = compile_graph(checkpointer)
        self.run = uuid.uuid4().hex[:8]

    def config(self, number: int) -> dict[str, Any]:
        return {"configurable": {"thread_id": f"{self.run}-{number}"}}

    async def park(self, number: int) -> None:
        start = {"messages": [{"role": "user", "content": "Pay Bob 5"}]}
        result = await self.graph.ainvoke(start, self.config(number), durability=self.durability)
        assert result["__interrupt__"]

    async def finish(self, number: int) -> None:
        from langgraph.types import Command

        graph = compile_graph(self.checkpointer)  # a fresh graph object, as a fresh process would build
        (pending,) = (await graph.aget_state(self.config(number))).interrupts
        assert pending.value["tool_call"]["name"] == "transfer"
        result = await graph.ainvoke(
            Command(resume={"approved": True}), self.config(number), durability=self.durability
        )
        assert result["messages"][-1]["content"] == "Done."


def langgraph_missing(postgres: bool = False) -> str | None:
    """None if the LangGraph checkpointer can be imported, else why not (printed with how to install it)."""
    module = "langgraph.checkpoint.postgres.aio" if postgres else "langgraph.checkpoint.sqlite.aio"
    try:
        importlib.import_module("langgraph.graph")
        importlib.import_module(module)
    except ImportError as error:
        print(f"LangGraph not measured ({error}); install it with: pip install -e \".[bench,postgres]\"",
              file=sys.stderr)  # fmt: skip
        return str(error)
    return None


async def langgraph_sqlite(
    stack: AsyncExitStack, path: Path, durability: str | None, label: str, synchronous: str = "NORMAL"
) -> LangGraphSide:
    import aiosqlite
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    connection = await stack.enter_async_context(aiosqlite.connect(path))
    saver = AsyncSqliteSaver(connection)
    await saver.setup()  # journal_mode=WAL, as tarry
    # NORMAL: tarry's durability="fast"; FULL (SQLite's default): tarry's default, durability="full"
    await connection.execute(f"PRAGMA synchronous={synchronous}")
    return LangGraphSide(label, saver, durability)


async def langgraph_postgres(stack: AsyncExitStack, url: str, durability: str | None, label: str) -> LangGraphSide:
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    saver = await stack.enter_async_context(AsyncPostgresSaver.from_conn_string(url))
    await saver.setup()
    return LangGraphSide(label, saver, durability)


async def tarry_side(stack: AsyncExitStack, url: str, label: str, durability: Durability = "full") -> TarrySide:
    store = await stack.enter_async_context(Store(url, durability=durability))
    await store.setup()
    return TarrySide(label, store)


def latency_figures(park: list[float], finish: list[float]) -> dict[str, float]:
    return {
        "park_p50_ms": statistics.median(park) * 1000,
        "park_p99_ms": percentile(park, 0.99) * 1000,
        "finish_p50_ms": statistics.median(finish) * 1000,
        "finish_p99_ms": percentile(finish, 0.99) * 1000,
    }


async def interleaved_latency(sides: list[Side], count: int) -> dict[str, dict[str, float]]:
    """Parks ``count`` chats per side, then finishes them, alternating the sides chat by chat.

    Interleaving gives every side the same share of whatever else the machine is doing meanwhile.
    """
    park: dict[str, list[float]] = {side.label: [] for side in sides}
    finish: dict[str, list[float]] = {side.label: [] for side in sides}
    for phase, timings in (("park", park), ("finish", finish)):
        for number in range(count):
            for side in sides if number % 2 == 0 else sides[::-1]:
                started = time.perf_counter()
                await getattr(side, phase)(number)
                timings[side.label].append(time.perf_counter() - started)
    return {side.label: latency_figures(park[side.label], finish[side.label]) for side in sides}


async def latency_per_chat(
    tarry_url: str,
    fast_url: str,
    count: int,
    langgraph: list[tuple[str, str | Path, str | None]],
    others: dict[str, str | Path] | None = None,
) -> dict[str, dict[str, float]]:
    """tarry on ``tarry_url`` (and with fast commits on ``fast_url``) beside each LangGraph set-up in ``langgraph``
    and each other peer in ``others`` (see bench/peers.py).

    ``langgraph`` holds (label, file or URL, durability); ``others`` maps a peer's name to its file or URL.
    """
    async with AsyncExitStack() as stack:
        sides: list[Side] = [
            await tarry_side(stack, tarry_url, 'tarry, `durability="full"` (the default)'),
            await tarry_side(stack, fast_url, 'tarry, `durability="fast"`', "fast"),
        ]
        for label, where, durability in langgraph:
            if isinstance(where, Path):
                sides.append(await langgraph_sqlite(stack, where, durability, label))
            else:
                sides.append(await langgraph_postgres(stack, where, durability, label))
        sides += await peer_sides(stack, others or {})
        return await interleaved_latency(sides, count)


async def writes_per_step(url: str, sizes: list[int]) -> list[dict[str, int]]:
    """One step (a tool call, its result, the model's reply) at growing transcript lengths."""

    def turn(history: list[Message]) -> Any:
        return [{"name": "lookup", "arguments": {"query": "x"}}] if history[-1].role == "user" else "ok"

    rows = []
    async with Store(url) as store:
        await store.setup()
        counter = Counter(store)
        chat = await store.create_chat(ScriptedModel([turn] * 2000), [Lookup()])
        for size in sizes:
            while len(chat.messages) + 4 < size:
                await chat.ask("again")
            with counter.measure() as figures:
                await chat.ask("measure")
            rows.append({"messages": len(chat.messages), **figures})
    return rows


async def langgraph_writes_per_step(path: Path, sizes: list[int]) -> list[dict[str, int]]:
    """The step of :func:`writes_per_step` in LangGraph on a SQLite checkpointer (``durability="sync"``).

    Bytes are what the step added to the checkpointer's tables: the checkpoints' and their metadata's
    serialised bytes and the pending writes' values (LangGraph keeps every checkpoint of a thread).
    """
    async with AsyncExitStack() as stack:
        side = await langgraph_sqlite(stack, path, "sync", "LangGraph")
        graph = compile_graph(side.checkpointer, graph_lookup)
        config = side.config(0)
        connection = side.checkpointer.conn

        async def stored() -> int:
            total = 0
            for sql in (
                "SELECT coalesce(sum(length(checkpoint) + length(metadata)), 0) FROM checkpoints",
                "SELECT coalesce(sum(length(value)), 0) FROM writes",
            ):
                async with connection.execute(sql) as cursor:
                    total += int((await cursor.fetchone())[0])
            return total

        async def step() -> int:
            state = await graph.ainvoke({"messages": [{"role": "user", "content": "again"}]}, config, durability="sync")
            return len(state["messages"])

        rows, length = [], 0
        for size in sizes:
            while length + 4 < size:
                length = await step()
            before = await stored()
            length = await step()
            rows.append({"messages": length, "write_bytes": await stored() - before})
    return rows


async def round_trip_counts(url: str) -> dict[str, dict[str, int]]:
    """Transactions and statements of the latency workload's two halves, for one chat (after a warm-up chat), and of
    its second half with the decision made elsewhere (``elsewhere``)."""
    async with Store(url) as store:
        await store.setup()
        side, other = TarrySide("tarry", store), DecidedElsewhereSide("tarry", store)
        for warm_up in (side, other):
            await warm_up.park(0)
            await warm_up.finish(0)
        counter = Counter(store)
        counts = {}
        for name, phase, number in (("park", side.park, 1), ("finish", side.finish, 1)):
            with counter.measure() as figures:
                await phase(number)
            counts[name] = figures
        await other.park(1)
        with counter.measure() as figures:
            await other.finish(1)
        counts["elsewhere"] = figures
        return counts


async def listing_at_scale(url: str, finished: int, waiting: int) -> dict[str, Any]:
    """``pending_questions()`` and ``list_chats(waiting=True)`` over ``finished`` done chats and ``waiting`` parked
    ones; a database that holds them already (:func:`fill_for_listing` made it) is measured as it is."""
    async with Store(url) as store:
        await store.setup()
        await fill_for_listing(store, finished, waiting)
        counter = Counter(store)
        timings = []
        for _ in range(20):
            with counter.measure() as figures:
                started = time.perf_counter()
                listed = await store.pending_questions()
                timings.append(time.perf_counter() - started)
        assert len(listed) == waiting, len(listed)
        page_timings, paged, later = [], 0, None
        for _ in range(5):  # every page of PAGE, five times over
            cursor = None
            while True:
                with counter.measure() as page_figures:
                    started = time.perf_counter()
                    page = await store.pending_questions(limit=PAGE, cursor=cursor)
                    page_timings.append(time.perf_counter() - started)
                paged += len(page)
                if page.next_cursor is None:
                    break
                cursor = later = page.next_cursor
        assert paged == 5 * waiting, paged
        plan = await query_plan(store, later)
        chat_timings = []
        for _ in range(20):
            started = time.perf_counter()
            summaries = await store.list_chats(waiting=True)
            chat_timings.append(time.perf_counter() - started)
        assert len(summaries) == waiting, len(summaries)
        stored_bytes = await database_bytes(store, url)
        tables = {} if store.db.is_sqlite else await bytes_by_table(store)
    return {
        "chats": finished + waiting,
        "waiting": waiting,
        "statements": figures["statements"],
        "p50_ms": statistics.median(timings) * 1000,
        "page_statements": page_figures["statements"],
        "page_p50_ms": statistics.median(page_timings) * 1000,
        "page_p99_ms": percentile(page_timings, 0.99) * 1000,
        "plan": plan,
        "waiting_chats_p50_ms": statistics.median(chat_timings) * 1000,
        "bytes_per_chat": stored_bytes / (finished + waiting),
        "bytes_per_chat_by_table": {name: size / (finished + waiting) for name, size in tables.items()},
    }


async def fill_for_listing(store: Store, finished: int, waiting: int) -> None:
    """``finished`` done chats, then ``waiting`` chats parked on an approval through the store; nothing when the
    database holds that many chats already (a kept database, measured again), an error when it holds others."""
    held = await store.db.run_read(lambda connection: connection.scalar(select(func.count()).select_from(chats)))
    if held == finished + waiting:
        return
    if held:
        raise SystemExit(f"The database holds {held} chats, not {finished + waiting}: drop it, or ask for {held}")
    now = datetime.now(UTC)
    batch = 100_000 if not store.db.is_sqlite else 5000
    for start in range(0, finished, batch):
        size = min(batch, finished - start)
        if store.db.is_sqlite:
            ids = [str(uuid.uuid4()) for _ in range(size)]
            await store.db.run_write(partial(insert_finished_chats, ids, now))
        else:
            values = {"now": now, "first": start, "last": start + size - 1, "all": finished}
            await store.db.run_write(lambda connection, v=values: connection.execute(FINISHED_CHATS, v))
    for _ in range(waiting):
        chat = await store.create_chat(transfer_model(), [Transfer()])
        await chat.ask("Pay Bob 5")
    if not store.db.is_sqlite:
        await store.db.run_write(lambda connection: connection.execute(text("ANALYZE")))


FINISHED_CHATS = text("""
WITH c AS (
    INSERT INTO tarry_chats (id, settings, created_at, message_count)
    SELECT gen_random_uuid()::text, '{}', CAST(:now AS timestamptz) - (:all - n) * interval '1 second', 3
    FROM generate_series(CAST(:first AS integer), CAST(:last AS integer)) AS n
    RETURNING id, created_at
), m AS (
    INSERT INTO tarry_messages (chat_id, position, role, content, tool_call_id, created_at)
    SELECT id, 2, 'tool', 'Sent', 'c' || id, created_at FROM c
    RETURNING id, chat_id, created_at
), t AS (
    INSERT INTO tarry_tool_calls
        (chat_id, message_position, call_id, name, arguments, needs_approval, version, result_message_id, created_at)
    SELECT chat_id, 1, 'c' || chat_id, 'transfer', '{"amount": 5}', true, 1, id, created_at FROM m
    RETURNING id, chat_id, created_at
)
INSERT INTO tarry_questions (id, chat_id, tool_call_id, number, kind, message, asked_at, decision, answer, decided_at)
SELECT gen_random_uuid()::text, chat_id, id, 0, 'approval', 'Approve?', created_at, 'accept', '{}', created_at FROM t
""")
"""Finished chats numbered ``first`` to ``last`` of ``all``, made by PostgreSQL itself, one a second up to ``now``:
rows shaped as :func:`insert_finished_chats` writes them, a hundred thousand in a statement."""


async def database_bytes(store: Store, url: str) -> int:
    """What the store's tables take on disk, indexes included: SQLite's file (with its WAL), PostgreSQL's
    relations."""
    if store.db.is_sqlite:
        path = Path(url.removeprefix("sqlite:///"))
        return sum(part.stat().st_size for part in (path, Path(f"{path}-wal")) if part.exists())
    query = text(
        "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE c.relkind = 'r' AND n.nspname = current_schema() AND c.relname LIKE 'tarry%'"
    )
    return int(await store.db.run_read(lambda connection: connection.scalar(query)) or 0)


async def bytes_by_table(store: Store) -> dict[str, int]:
    """PostgreSQL: what each of the store's tables of more than a megabyte takes on disk, indexes included, largest
    first."""
    query = text(
        "SELECT c.relname, pg_total_relation_size(c.oid) AS size FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind = 'r' AND n.nspname = current_schema() "
        "AND c.relname LIKE 'tarry%' AND pg_total_relation_size(c.oid) > 1048576 ORDER BY size DESC"
    )
    return dict(await store.db.run_read(lambda connection: connection.execute(query).tuples().all()))


def insert_finished_chats(ids: list[str], now: datetime, connection: Connection) -> None:
    """Rows of finished chats, shaped as tarry writes them: an approved call with its result."""
    connection.execute(insert(chats), [{"id": i, "settings": {}, "created_at": now, "message_count": 3} for i in ids])
    connection.execute(
        insert(messages),
        [{"chat_id": i, "position": 2, "role": "tool", "content": "Sent", "tool_call_id": f"c{i}", "created_at": now}
         for i in ids],
    )  # fmt: skip
    message_ids = dict(
        connection.execute(
            select(messages.c.chat_id, messages.c.id).where(messages.c.chat_id.in_(ids), messages.c.position == 2)
        ).all()
    )
    connection.execute(
        insert(tool_calls),
        [{"chat_id": i, "message_position": 1, "call_id": f"c{i}", "name": "transfer", "arguments": {"amount": 5},
          "needs_approval": True, "version": 1, "result_message_id": message_ids[i], "created_at": now}
         for i in ids],
    )  # fmt: skip
    call_ids = dict(
        connection.execute(select(tool_calls.c.chat_id, tool_calls.c.id).where(tool_calls.c.chat_id.in_(ids))).all()
    )
    connection.execute(
        insert(questions),
        [{"id": str(uuid.uuid4()), "chat_id": i, "tool_call_id": call_ids[i], "number": 0, "kind": "approval",
          "message": "Approve?", "asked_at": now, "decision": "accept", "answer": {}, "decided_at": now}
         for i in ids],
    )  # fmt: skip


async def query_plan(store: Store, cursor: str | None) -> str:
    """The database's plan of the page after ``cursor``, of the query :meth:`Store.pending_questions` runs."""
    from sqlalchemy.dialects import postgresql, sqlite

    from tarry.clock import utcnow
    from tarry.store.paging import decode_cursor, pending_query

    query, values = pending_query(utcnow(), None, PAGE + 1, None if cursor is None else decode_cursor(cursor))
    dialect = sqlite.dialect() if store.db.is_sqlite else postgresql.dialect()
    compiled = query.compile(dialect=dialect)
    prefix = "EXPLAIN QUERY PLAN " if store.db.is_sqlite else "EXPLAIN "
    parameters: Any = compiled.construct_params(values)
    if store.db.is_sqlite:
        parameters = tuple(parameters[name] for name in compiled.positiontup or ())
    rows = await store.db.run_read(
        lambda connection: connection.exec_driver_sql(prefix + str(compiled), parameters).all()
    )
    return "\n".join(str(row[-1]) for row in rows)


async def prepare_answers(url: str, count: int, lanes: int = 8) -> list[str]:
    """``count`` chats, each parked on one approval, started ``lanes`` at a time; the questions' ids."""
    async with Store(url) as store:
        await store.setup()

        async def park(share: int) -> None:
            for _ in range(share):
                await store.start_chat("Pay Bob 5", transfer_model(), [Transfer()])

        await asyncio.gather(*(park(len(range(lane, count, lanes))) for lane in range(lanes)))
        return [question.id for question in await store.pending_questions()]


def answers_per_second(
    url: str, processes: int, per_process: int, concurrency: int = 1, *, floor: bool = False
) -> dict[str, Any]:
    """``processes`` processes approve their shares of the questions, each ``concurrency`` at a time.

    Each process reports how many decisions it recorded and the CPU seconds its answers took; the machine's busy
    CPU time over the run (every process, the database server's too) is measured where Linux tells it.
    Each question is approved by one process; afterwards every question must be decided and the
    processes' counts of recorded decisions must add up to the number of questions. With ``floor``
    the processes use no library: see :func:`floor_part`.
    """
    ids = asyncio.run(prepare_answers(url, processes * per_process))
    with tempfile.TemporaryDirectory() as folder:
        go = Path(folder) / "go"
        workers = []
        for number in range(processes):
            part = Path(folder) / f"part{number}.json"
            part.write_text(json.dumps(ids[number::processes]))
            workers.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        __file__,
                        "--floor" if floor else "--answer",
                        url,
                        str(part),
                        str(go),
                        str(concurrency),
                    ],
                    stdout=subprocess.PIPE,
                    text=True,
                    cwd=ROOT,
                )
            )
        ready = [Path(folder) / f"part{number}.json.ready" for number in range(processes)]
        while not all(path.exists() for path in ready):
            time.sleep(0.01)
        started, busy = time.perf_counter(), machine_busy_seconds()
        go.touch()
        told = [worker.communicate()[0].split() for worker in workers]
        elapsed = time.perf_counter() - started
        busy_after = machine_busy_seconds()
        recorded = sum(int(answered) for answered, _ in told)
        cpu = sum(float(seconds) for _, seconds in told)
    undecided = asyncio.run(count_undecided(url))
    assert recorded == len(ids) and undecided == 0, (recorded, len(ids), undecided)
    return {
        "processes": processes,
        "concurrency": concurrency,
        "answers": recorded,
        "seconds": elapsed,
        "per_second": recorded / elapsed,
        "cpu_ms": cpu / recorded * 1000,
        "machine_cpu_ms": None if busy is None or busy_after is None else (busy_after - busy) / recorded * 1000,
    }


def machine_busy_seconds() -> float | None:
    """CPU seconds every core of the machine has been busy since it booted (Linux's ``/proc/stat``: all but idle
    and waiting for the disk), or ``None`` where there is no such file."""
    try:
        first = Path("/proc/stat").read_text().splitlines()[0].split()
    except OSError:
        return None
    ticks = [int(value) for value in first[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


async def count_undecided(url: str) -> int:
    async with Store(url) as store:
        query = select(func.count()).select_from(questions).where(questions.c.decision.is_(None))
        return int(await store.db.run_read(lambda connection: connection.execute(query).scalar_one()))


def ready_and_wait(part: str, go: str) -> None:
    """Tells the parent this worker is ready, then waits for its signal (a file; the processes share no loop)."""
    Path(part + ".ready").touch()
    while not Path(go).exists():
        time.sleep(0.005)


async def answer_part(url: str, ids: list[str], part: str, go: str, concurrency: int) -> None:
    async with Store(url) as store:
        await store.pending_questions(limit=1)  # connects before the clock starts
        await asyncio.to_thread(ready_and_wait, part, go)

        async def lane(share: list[str]) -> int:
            return sum([await store.approve(question_id) for question_id in share])

        cpu = time.process_time()
        recorded = await asyncio.gather(*(lane(ids[number::concurrency]) for number in range(concurrency)))
        cpu = time.process_time() - cpu
    print(sum(recorded), cpu)


def floor_part(url: str, ids: list[str], part: str, go: str) -> None:
    """The floor: the smallest durable, single-use decision, through psycopg alone, one at a time.

    Each is one statement that records the decision unless one is recorded, committing by itself
    (``synchronous_commit`` as the server has it): one round trip. tarry's decision does more in its
    one statement (it bumps the call's and the chat's versions, wakes the chat with a notification
    and appends the audit row); no library can record one faster than this on the same server.
    """
    import psycopg

    plain = url.replace("postgresql+psycopg://", "postgresql://")
    # Written as tarry writes it: with a plain ``decision IS NULL``, the generic plan that psycopg's prepared
    # statement gets on young tables reads the whole partial index of undecided questions (store/tables.py).
    record = "UPDATE tarry_questions SET decision = 'accept', decided_at = now() WHERE id = %s"
    record += " AND (decision IS NULL) IS TRUE"
    with psycopg.connect(plain, autocommit=True) as connection:
        connection.execute("SELECT 1")  # connects before the clock starts
        ready_and_wait(part, go)
        cpu = time.process_time()
        recorded = 0
        for question_id in ids:
            recorded += connection.execute(record, (question_id,)).rowcount
        cpu = time.process_time() - cpu
    print(recorded, cpu)


def commit_cost(url: str, durability: Durability, count: int = 200) -> float:
    """The p50 milliseconds of the smallest write transaction (one row inserted, committed), through the driver alone.

    The floor under every write transaction any library makes on this machine with these settings:
    SQLite in WAL mode (``FULL`` syncs the disk at each commit, ``NORMAL`` does not), or PostgreSQL
    (``synchronous_commit`` on, or off for ``"fast"``).
    """
    timings = []
    if url.startswith("sqlite"):
        import sqlite3

        connection = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute(f"PRAGMA synchronous={'FULL' if durability == 'full' else 'NORMAL'}")
        connection.execute("CREATE TABLE IF NOT EXISTS commit_cost (number INTEGER)")
        for number in range(count):
            started = time.perf_counter()
            connection.execute("BEGIN IMMEDIATE")
            connection.execute("INSERT INTO commit_cost VALUES (?)", (number,))
            connection.execute("COMMIT")
            timings.append(time.perf_counter() - started)
        connection.close()
    else:
        import psycopg

        with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as connection:
            connection.execute(f"SET synchronous_commit = {'on' if durability == 'full' else 'off'}")
            connection.execute("CREATE TABLE IF NOT EXISTS commit_cost (number INTEGER)")
            for number in range(count):
                started = time.perf_counter()
                connection.execute("INSERT INTO commit_cost VALUES (%s)", (number,))
                timings.append(time.perf_counter() - started)
    return statistics.median(timings) * 1000


async def one_chat(url: str) -> str:
    """Set the database at ``url`` up and create one chat in it; returns its id."""
    async with Store(url) as store:
        await store.setup()
        return (await store.create_chat()).id


def statement_cost(url: str, count: int = 2000) -> dict[str, float]:
    """The p50 microseconds of one keyed one-row read four ways: through tarry's store, through SQLAlchemy Core,
    through tarry's cursor (:mod:`tarry.store.cursor`) and through the driver alone.

    The read is the check that a chat is unchanged (``SELECT version FROM tarry_chats WHERE id = ...``) on
    a connection kept open, outside any transaction, as tarry sends it. Between SQLAlchemy Core and the
    driver alone is SQLAlchemy's execution layer, which tarry's cursor skips; between the store and
    tarry's cursor, the rest of tarry's way of running a statement (on PostgreSQL the event loop's
    task, greenlet and kept connection; a span).
    """
    from sqlalchemy import create_engine

    from tarry.store.cursor import fetch_value

    chat_id = asyncio.run(one_chat(url))
    query = select(chats.c.version).where(chats.c.id == chat_id)
    raw_sql = "SELECT version FROM tarry_chats WHERE id = " + ("?" if url.startswith("sqlite") else "%s")

    def p50(run: Callable[[], object]) -> float:
        for _ in range(200):
            run()
        timings = []
        for _ in range(count):
            started = time.perf_counter()
            run()
            timings.append(time.perf_counter() - started)
        return statistics.median(timings) * 1_000_000

    async def through_the_store() -> float:
        async with Store(url) as store:
            for _ in range(200):
                await store.chat_version(chat_id)
            timings = []
            for _ in range(count):
                started = time.perf_counter()
                await store.chat_version(chat_id)
                timings.append(time.perf_counter() - started)
        return statistics.median(timings) * 1_000_000

    figures = {"store": asyncio.run(through_the_store())}
    engine = create_engine(database_url(url))
    with engine.connect() as connection:
        core = connection.execution_options(isolation_level="AUTOCOMMIT")
        figures["sqlalchemy"] = p50(lambda: core.scalar(query))
        figures["cursor"] = p50(lambda: fetch_value(core, query, {}))
        driver = connection.connection.driver_connection
        assert driver is not None
        cursor = driver.cursor()
        figures["driver"] = p50(lambda: cursor.execute(raw_sql, (chat_id,)).fetchone())
    engine.dispose()
    return figures


SCHEMAS: list[tuple[str, str]] = []
"""(server URL, schema) of each schema :func:`fresh_postgres` made, for :func:`drop_schemas`."""


def fresh_postgres(url: str) -> str:
    """A URL of ``url``'s server whose tables go to a new schema of their own."""
    import psycopg

    schema = f"tarry_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(f'CREATE SCHEMA "{schema}"')
    SCHEMAS.append((url, schema))
    return f"{url}?options=-csearch_path%3D{schema}"


def kept_postgres(url: str, name: str) -> str:
    """The URL of database ``name`` on ``url``'s server, made when missing; never dropped here."""
    import psycopg
    from sqlalchemy.engine import make_url

    with psycopg.connect(url, autocommit=True) as connection:
        if connection.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
            connection.execute(f'CREATE DATABASE "{name}"')
    return make_url(url).set(database=name).render_as_string(hide_password=False)


def drop_schemas() -> None:
    """Drop every schema :func:`fresh_postgres` made."""
    import psycopg

    while SCHEMAS:
        url, schema = SCHEMAS.pop()
        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute(f'DROP SCHEMA "{schema}" CASCADE')


PAGE = 50
LANGGRAPH_MODES: list[tuple[str, str | None]] = [
    ('LangGraph, `durability="sync"`', "sync"),
    ('LangGraph, default `durability` ("async")', None),
]


def latency_section(
    count: int, folder: Path, postgres: str | None
) -> tuple[list[str], list[tuple[str, str, dict[str, float]]]]:
    """Latency per chat: tarry beside its peers on a SQLite file, and on PostgreSQL when a URL is given.

    Returns the page's lines and the rows: (database, library, figures).
    """
    missing = langgraph_missing()
    missing_postgres = (missing or langgraph_missing(postgres=True)) if postgres else None
    rows: list[tuple[str, str, dict[str, float]]] = []
    sqlite_peers: list[tuple[str, str | Path, str | None]] = []
    if not missing:
        sqlite_peers = [(label, folder / f"langgraph-{mode}.db", mode) for label, mode in LANGGRAPH_MODES]
    sqlite_urls = f"sqlite:///{folder / 'latency.db'}", f"sqlite:///{folder / 'latency-fast.db'}"
    others: dict[str, str | Path] = {peer: folder / f"{PEERS[peer]}.db" for peer in PEERS}
    figures = asyncio.run(latency_per_chat(*sqlite_urls, count, sqlite_peers, others))
    rows += [("SQLite file", label, figures[label]) for label in figures]
    if postgres:
        postgres_peers: list[tuple[str, str | Path, str | None]] = []
        if not missing_postgres:
            postgres_peers = [(label, fresh_postgres(postgres), mode) for label, mode in LANGGRAPH_MODES]
        others = {peer: fresh_postgres(postgres) for peer in PEERS}
        figures = asyncio.run(
            latency_per_chat(fresh_postgres(postgres), fresh_postgres(postgres), count, postgres_peers, others)
        )
        rows += [("PostgreSQL", label, figures[label]) for label in figures]
    lines = [
        "## Latency per chat, beside the peers",
        "",
        f"{count} chats in every row, one run, one machine. The rows of one database ran interleaved chat by chat",
        "(all chats parked, then all finished), so they shared whatever else the machine was doing.",
        "",
        "| database | library | run to the pause and save, p50 | p99 | load, approve, carry on to the final reply, p50 "
        "| p99 |",
        "|---|---|---|---|---|---|",
    ]
    for database, label, row in rows:
        lines.append(
            f"| {database} | {label} | {row['park_p50_ms']:.1f} ms | {row['park_p99_ms']:.1f} ms "
            f"| {row['finish_p50_ms']:.1f} ms | {row['finish_p99_ms']:.1f} ms |"
        )
    lines += ["", *LATENCY_WORKLOAD, ""]
    if missing:
        lines += [f"LangGraph was not measured in this run: it could not be imported ({missing}).", ""]
    elif postgres and missing_postgres:
        lines += [f"LangGraph on PostgreSQL was not measured: its checkpointer could not be imported "
                  f"({missing_postgres}).", ""]  # fmt: skip
    elif not postgres:
        lines += ["PostgreSQL was not measured in this run: no `--postgres URL` was given.", ""]
    if not missing:
        versions = ", ".join(
            f"{name} {importlib.metadata.version(name)}"
            for name in ("langgraph", "langgraph-checkpoint-sqlite", "langgraph-checkpoint-postgres")
            if importlib.util.find_spec(name.replace("-", ".")) is not None
        )
        versions += "".join(f", {VERSIONS[peer]} {importlib.metadata.version(VERSIONS[peer])}" for peer in PEERS
                            if importlib.util.find_spec(PEERS[peer]) is not None)  # fmt: skip
        lines += [f"Versions: tarry {importlib.metadata.version('tarry')}, {versions}.", ""]
    lines += LATENCY_DIFFERENCES
    return [*lines, ""], rows


LATENCY_WORKLOAD = [
    "What each row does per chat. No LLM on either side: the figures compare persistence and loop overhead.",
    "",
    "- **tarry**: `store.start_chat` (`create_chat` and `ask` in one write fewer); the `ScriptedModel` calls",
    "  `transfer`, a tool that needs approval, and the chat parks and saves. Then `load_chat` in a fresh chat",
    "  object, `pending_questions()`, `complete(approve=[question])` (the approval, then the run on: the tool runs",
    "  and the model gives its final reply).",
    "- **LangGraph**: a graph of two plain function nodes, `model` (the same script, as a function) and `tools`",
    "  (calls `interrupt()` for approval, then runs the same `Transfer` tool), compiled with `AsyncSqliteSaver` or",
    "  `AsyncPostgresSaver`, one thread per chat, state a list of plain dicts (no LangChain message objects).",
    "  `ainvoke` until the interrupt; then a freshly compiled graph on the same checkpointer reads the pending",
    '  interrupt (`aget_state`) and resumes with `Command(resume={"approved": True})` to the final reply.',
    "- **pydantic-ai**: an `Agent` on a `FunctionModel` (the same script) with `transfer` as a tool with",
    "  `requires_approval=True` and `DeferredToolRequests` among its outputs; the run's message history is saved",
    "  as JSON in one row. Then a fresh agent loads it and runs on with `DeferredToolResults(approvals=...)`, and",
    "  the final history is saved again.",
    "- **OpenAI Agents SDK**: an `Agent` on a custom `Model` (the same script) with `transfer` as a function tool",
    "  with `needs_approval=True`; `result.to_state().to_string()` is saved in one row. Then a fresh agent loads it",
    "  (`RunState.from_string`), approves the interruption, runs on, and the final input list is saved again.",
    "  Tracing is off (it would export over the network).",
    "- Each library has its own database file (SQLite) or its own fresh schema (PostgreSQL), and keeps its",
    '  connections (tarry: one per thread) open for the run: "fresh" means a fresh chat or graph object, not a',
    "  new process.",
    '- SQLite: all use WAL. tarry\'s default (`durability="full"`) is `synchronous=FULL`, a disk sync at every',
    '  commit, so a power cut loses no commit; `durability="fast"` is `synchronous=NORMAL` (PostgreSQL:',
    "  `synchronous_commit=off`), the setting every peer's rows run with on SQLite, so those rows pay the same",
    "  for a commit. On PostgreSQL the peers keep the server's default, `synchronous_commit=on`, as tarry's",
    '  `"full"`. The difference between tarry\'s two rows is what surviving a power cut costs.',
    '- `durability="sync"` writes each step\'s checkpoint before the next step starts, as tarry writes each change',
    '  before going on. LangGraph\'s default, `"async"`, writes it while the next step runs; in both modes',
    "  `ainvoke` returns after the writes are done.",
]

LATENCY_DIFFERENCES = [
    "What each side does that the other does not, in this workload:",
    "",
    "- tarry stores the approval as a question row of its own (id, kind, fields, optional time to live). Any",
    "  process can list what waits across all chats with one indexed query (`pending_questions()`) and record a",
    "  decision without the model or the tools. The decision is single-use: one transaction under a row lock, a",
    "  second decision on the same question returns `False`. Carrying the chat on is a separate step, and a lease",
    "  on the tool call keeps two processes from running the tool at once.",
    "- LangGraph's resume value is passed in by the caller of `Command(resume=...)`, who also runs the rest of",
    "  the graph in that call. Listing the threads that wait on an interrupt is not a query of the checkpointer",
    "  here: the caller knows the thread id, or reads each thread's state. Guarding against two concurrent",
    "  resumes of one thread is left to the application (LangGraph's deployment server offers it; the open-source",
    "  library does not). On resume, the interrupted node runs again from its start, so code before",
    "  `interrupt()` must be safe to repeat.",
    "- LangGraph keeps every step's checkpoint of a thread, so a run can be inspected, replayed or forked from",
    "  an earlier step; it runs arbitrary graphs (branches, parallel nodes, subgraphs) with typed state and",
    "  reducers, and its interrupt can carry and return any value. tarry keeps one transcript per chat and the",
    "  records of its tool calls, and its loop is the chat loop: model, tools, model.",
]


def machine_load(at_start: float, at_end: float) -> list[str]:
    """A line on how busy the machine was, from the one-minute load average before and after the run."""
    cores = os.cpu_count() or 1
    figures = f"one-minute load average {at_start:.1f} at the start and {at_end:.1f} at the end, on {cores} cores"
    if max(at_start, at_end) < cores / 2:
        return [f"The machine was quiet: {figures}."]
    return [
        f"The machine was busy with other work during the run: {figures}.",
        "Absolute figures are noisy; rows compared side by side ran interleaved, so they shared the load.",
    ]


def listing_only(arguments: list[str]) -> None:
    """Only :func:`listing_at_scale`, on SQLite and (``--postgres`` or the test URL) PostgreSQL; prints the figures."""
    import argparse

    parser = argparse.ArgumentParser(prog="store_bench.py --listing", description=listing_only.__doc__)
    parser.add_argument("--postgres", default=os.environ.get("TARRY_TEST_POSTGRES_URL"), help="a PostgreSQL URL")
    parser.add_argument("--scale", type=int, default=100_000, help="chats in all")
    parser.add_argument("--waiting", type=int, default=1_000, help="chats among them waiting on an approval")
    parser.add_argument("--only", choices=["sqlite", "postgres"], help="one database only")
    parser.add_argument(
        "--database",
        help="on PostgreSQL, this database of the server (made when missing) instead of a new schema: kept, and "
        "measured as it is when it holds --scale chats already",
    )
    options = parser.parse_args(arguments)
    targets = []
    with tempfile.TemporaryDirectory() as folder:
        if options.only != "postgres":
            targets.append(("SQLite", f"sqlite:///{Path(folder) / 'scale.db'}"))
        if options.postgres and options.only != "sqlite":
            kept = options.database and kept_postgres(options.postgres, options.database)
            targets.append(("PostgreSQL", kept or fresh_postgres(options.postgres)))
        try:
            for label, url in targets:
                found = asyncio.run(listing_at_scale(url, options.scale - options.waiting, options.waiting))
                print(
                    f"{label}: whole p50 {found['p50_ms']:.1f} ms, page p50 {found['page_p50_ms']:.2f} ms, "
                    f"page p99 {found['page_p99_ms']:.2f} ms, {found['page_statements']} statement(s) a page, "
                    f"waiting chats listed p50 {found['waiting_chats_p50_ms']:.1f} ms, "
                    f"{found['bytes_per_chat']:.0f} bytes a chat"
                )
                print("  " + found["plan"].replace("\n", "\n  "))
        finally:
            drop_schemas()


def main() -> None:
    """``--answer …`` (``--floor …``) is one answering process, ``--listing`` runs only the listing at scale;
    else bench/report.py."""
    if sys.argv[1:2] == ["--listing"]:
        listing_only(sys.argv[2:])
        return
    if sys.argv[1:2] == ["--floor"]:
        url, part, go = sys.argv[2:5]
        floor_part(url, json.loads(Path(part).read_text()), part, go)
        return
    if sys.argv[1:2] == ["--answer"]:
        url, part, go, *concurrency = sys.argv[2:6]
        asyncio.run(
            answer_part(url, json.loads(Path(part).read_text()), part, go, int(concurrency[0] if concurrency else 1))
        )
        return
    from report import main as report

    report()


if __name__ == "__main__":
    main()
