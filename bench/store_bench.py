"""Store benchmarks: latency per chat, writes per step, listing at scale, answers per second.

Run: ``python bench/store_bench.py [--postgres URL] [--out docs/benchmarks-store.md]``.
Each figure is measured in this run; the page it writes says on what machine and when.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import event, insert, text

from tarry import Message, Tool
from tarry.store import Store
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
    """Counts statements and the bytes of parameters the engine sends in write statements."""

    def __init__(self, store: Store) -> None:
        self.statements = 0
        self.write_bytes = 0
        event.listen(store.db.engine.sync_engine, "before_cursor_execute", self._seen)

    def _seen(self, conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> None:
        if statement.startswith(("BEGIN", "COMMIT", "PRAGMA")):
            return
        self.statements += 1
        if statement.lstrip().upper().startswith(("INSERT", "UPDATE")):
            self.write_bytes += len(repr(parameters).encode())

    @contextmanager
    def measure(self) -> Iterator[dict[str, int]]:
        before = (self.statements, self.write_bytes)
        figures: dict[str, int] = {}
        yield figures
        figures["statements"] = self.statements - before[0]
        figures["write_bytes"] = self.write_bytes - before[1]


async def latency_per_chat(url: str, count: int) -> dict[str, float]:
    park, finish = [], []
    async with Store(url) as store:
        await store.setup()
        ids = []
        for _ in range(count):
            started = time.perf_counter()
            chat = await store.create_chat(transfer_model(), [Transfer()])
            await chat.ask("Pay Bob 5")
            park.append(time.perf_counter() - started)
            ids.append(chat.id)
        for chat_id in ids:
            started = time.perf_counter()
            chat = await store.load_chat(chat_id, transfer_model(), [Transfer()])
            (question,) = await chat.pending_questions()
            await chat.approve(question)
            await chat.complete()
            finish.append(time.perf_counter() - started)
    return {
        "park_p50_ms": statistics.median(park) * 1000,
        "park_p99_ms": percentile(park, 0.99) * 1000,
        "finish_p50_ms": statistics.median(finish) * 1000,
        "finish_p99_ms": percentile(finish, 0.99) * 1000,
    }


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


async def listing_at_scale(url: str, finished: int, waiting: int) -> dict[str, Any]:
    """``pending_questions()`` over ``finished`` done chats and ``waiting`` parked ones."""
    async with Store(url) as store:
        await store.setup()
        now = datetime.now(UTC)
        batch = 5000
        for start in range(0, finished, batch):
            size = min(batch, finished - start)
            ids = [str(uuid.uuid4()) for _ in range(size)]
            async with store.db.write() as connection:
                await connection.execute(insert(chats), [{"id": i, "settings": {}, "created_at": now} for i in ids])
                result_rows = [
                    {"chat_id": i, "position": 2, "role": "tool", "content": "Sent", "tool_call_id": f"c{i}",
                     "created_at": now}
                    for i in ids
                ]  # fmt: skip
                await connection.execute(insert(messages), result_rows)
                message_ids = dict(
                    (
                        await connection.execute(
                            text("SELECT chat_id, id FROM tarry_messages WHERE position = 2 AND role = 'tool'")
                        )
                    ).all()
                )
                call_rows = [
                    {"chat_id": i, "message_position": 1, "call_id": f"c{i}", "name": "transfer",
                     "arguments": {"amount": 5}, "needs_approval": True, "version": 1,
                     "result_message_id": message_ids[i], "created_at": now}
                    for i in ids
                ]  # fmt: skip
                await connection.execute(insert(tool_calls), call_rows)
                call_ids = dict(
                    (await connection.execute(text("SELECT chat_id, id FROM tarry_tool_calls WHERE version = 1"))).all()
                )
                await connection.execute(
                    insert(questions),
                    [
                        {"id": str(uuid.uuid4()), "chat_id": i, "tool_call_id": call_ids[i], "number": 0,
                         "kind": "approval", "message": "Approve?", "asked_at": now, "decision": "accept",
                         "answer": {}, "decided_at": now}
                        for i in ids
                    ],
                )  # fmt: skip
                await connection.execute(text("UPDATE tarry_tool_calls SET version = 2 WHERE version = 1"))
        for _ in range(waiting):
            chat = await store.create_chat(transfer_model(), [Transfer()])
            await chat.ask("Pay Bob 5")
        if not store.db.is_sqlite:
            async with store.db.write() as connection:
                await connection.execute(text("ANALYZE"))
        counter = Counter(store)
        timings = []
        for _ in range(20):
            with counter.measure() as figures:
                started = time.perf_counter()
                listed = await store.pending_questions()
                timings.append(time.perf_counter() - started)
        assert len(listed) == waiting, len(listed)
        plan = await query_plan(store)
    return {
        "chats": finished + waiting,
        "waiting": waiting,
        "statements": figures["statements"],
        "p50_ms": statistics.median(timings) * 1000,
        "plan": plan,
    }


async def query_plan(store: Store) -> str:
    from sqlalchemy.dialects import postgresql, sqlite

    from tarry.journal import utcnow
    from tarry.store.tables import questions as q
    from tarry.store.tables import tool_calls as c

    query = (
        q.select()
        .join(c, q.c.tool_call_id == c.c.id)
        .where(q.c.decision.is_(None), c.c.result_message_id.is_(None))
        .where((q.c.expires_at.is_(None)) | (q.c.expires_at > utcnow()))
        .order_by(c.c.id, q.c.number)
    )
    dialect = sqlite.dialect() if store.db.is_sqlite else postgresql.dialect()
    compiled = query.compile(dialect=dialect)
    prefix = "EXPLAIN QUERY PLAN " if store.db.is_sqlite else "EXPLAIN "
    async with store.db.read() as connection:
        rows = (await connection.exec_driver_sql(prefix + str(compiled), compiled.params if not store.db.is_sqlite
                                                   else tuple(compiled.params.values()))).all()  # fmt: skip
    return "\n".join(str(row[-1]) for row in rows)


async def prepare_answers(url: str, count: int) -> list[str]:
    async with Store(url) as store:
        await store.setup()
        for _ in range(count):
            chat = await store.create_chat(transfer_model(), [Transfer()])
            await chat.ask("Pay Bob 5")
        return [question.id for question in await store.pending_questions()]


def answers_per_second(url: str, processes: int, per_process: int) -> dict[str, float]:
    ids = asyncio.run(prepare_answers(url, processes * per_process))
    with tempfile.TemporaryDirectory() as folder:
        ids_file, go = Path(folder) / "ids.json", Path(folder) / "go"
        workers = []
        for number in range(processes):
            part = Path(folder) / f"part{number}.json"
            part.write_text(json.dumps(ids[number::processes]))
            workers.append(
                subprocess.Popen(
                    [sys.executable, __file__, "--answer", url, str(part), str(go)],
                    stdout=subprocess.PIPE, text=True, cwd=ROOT,
                )  # fmt: skip
            )
        ready = [Path(folder) / f"part{number}.json.ready" for number in range(processes)]
        while not all(path.exists() for path in ready):
            time.sleep(0.01)
        started = time.perf_counter()
        go.touch()
        recorded = sum(int(worker.communicate()[0]) for worker in workers)
        elapsed = time.perf_counter() - started
        del ids_file
    return {"processes": processes, "answers": recorded, "seconds": elapsed, "per_second": recorded / elapsed}


async def answer_part(url: str, part: str, go: str) -> None:
    ids = json.loads(Path(part).read_text())
    async with Store(url) as store:
        await store.pending_questions()
        Path(part + ".ready").touch()
        while not Path(go).exists():
            await asyncio.sleep(0.005)
        recorded = 0
        for question_id in ids:
            recorded += await store.approve(question_id)
    print(recorded)


def fresh_postgres(url: str) -> str:
    import psycopg

    schema = f"tarry_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(f'CREATE SCHEMA "{schema}"')
    return f"{url}?options=-csearch_path%3D{schema}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--postgres", default=os.environ.get("TARRY_TEST_POSTGRES_URL"))
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks-store.md"))
    parser.add_argument("--chats", type=int, default=200)
    parser.add_argument("--scale", type=int, default=100_000)
    parser.add_argument("--answer", nargs=3, help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.answer:
        asyncio.run(answer_part(*arguments.answer))
        return
    folder = Path(tempfile.mkdtemp())
    sqlite = lambda name: f"sqlite:///{folder / name}"  # noqa: E731
    lines = [
        "# Store benchmarks",
        "",
        f"Measured by `python bench/store_bench.py` on {datetime.now(UTC):%Y-%m-%d}, "
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}.",
        "",
        "## Latency per chat (SQLite file)",
        "",
    ]
    figures = asyncio.run(latency_per_chat(sqlite("latency.db"), arguments.chats))
    lines += [
        f"{arguments.chats} chats, each: create, ask, the model calls a tool that needs approval, park and save;",
        "then load in a fresh chat object, approve, run the tool, the model's final reply.",
        "",
        "| step | p50 | p99 |",
        "|---|---|---|",
        f"| run to the pause and save | {figures['park_p50_ms']:.1f} ms | {figures['park_p99_ms']:.1f} ms |",
        f"| load, approve, carry on to the final reply | {figures['finish_p50_ms']:.1f} ms "
        f"| {figures['finish_p99_ms']:.1f} ms |",
        "",
        "## Writes per step as the transcript grows (SQLite file)",
        "",
        "One step: a user message, the model's tool call, the tool's result, the model's reply. Statements are",
        "all SQL statements sent (reads included, BEGIN/COMMIT not); bytes are the parameters of INSERTs and UPDATEs.",
        "",
        "| messages before the step | statements | bytes written |",
        "|---|---|---|",
    ]
    for row in asyncio.run(writes_per_step(sqlite("steps.db"), [10, 100, 1000])):
        lines.append(f"| {row['messages']} | {row['statements']} | {row['write_bytes']} |")
    lines += ["", "## `pending_questions()` at scale", ""]
    targets = [("SQLite", sqlite("scale.db"))]
    if arguments.postgres:
        targets.append(("PostgreSQL", fresh_postgres(arguments.postgres)))
    lines += ["| database | chats | waiting | statements per call | p50 | plan |", "|---|---|---|---|---|---|"]
    for label, url in targets:
        scale = asyncio.run(listing_at_scale(url, arguments.scale - 1000, 1000))
        plan = scale["plan"].replace("\n", "; ").replace("|", "/")
        lines.append(
            f"| {label} | {scale['chats']:,} | {scale['waiting']:,} | {scale['statements']} "
            f"| {scale['p50_ms']:.1f} ms | {plan} |"
        )
    if arguments.postgres:
        result = answers_per_second(fresh_postgres(arguments.postgres), 8, 250)
        lines += [
            "",
            "## Answers per second (PostgreSQL, 8 processes)",
            "",
            f"{result['processes']} processes each approved their share of {result['answers']:,} questions "
            f"(one transaction each, row lock, conditional update) in {result['seconds']:.2f} s: "
            f"**{result['per_second']:,.0f} answers per second**.",
        ]
    Path(arguments.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
