"""Latency per chat with every library at ``synchronous=FULL`` on a SQLite file: a disk sync at every commit.

tarry runs at its default, ``durability="full"``, two ways: the chat object decides (``complete(approve=)``),
and the decision comes from elsewhere, as a second process makes it (the question listed from the store,
``store.approve``, then ``load_chat`` and ``complete()``). The peers of ``latency_section`` run the same
work, each on its own file with ``PRAGMA synchronous=FULL`` set on its connection and read back. Rounds
interleave the libraries: in each, every library parks one chat and carries it on, in an order that
alternates round by round, beside a floor (one row committed through Python's ``sqlite3`` alone). A round of
its own counts each library's commits per half from its file's WAL: one disk sync each, in WAL mode at
``FULL`` (checked against ``strace -f -e fdatasync``: 2 per round trip for the peers' rows, 11 for LangGraph,
5 and 6 for tarry's two ways, its WAL checkpoints aside).
"""

from __future__ import annotations

import asyncio
import sqlite3
import statistics
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from peers import PEERS, peer_sides
from store_bench import (
    DecidedElsewhereSide,
    LangGraphSide,
    Side,
    TarrySide,
    langgraph_missing,
    langgraph_sqlite,
    latency_figures,
)

from tarry.store import Store

CHAT_DECIDES = "tarry, the chat decides (`complete(approve=)`)"
ELSEWHERE = "tarry, decided elsewhere (`store.approve`, `load_chat`, `complete()`)"
FLOOR = "Python's `sqlite3` alone: one commit of one row"
LANGGRAPH = {'LangGraph, `durability="sync"`': "sync", 'LangGraph, default `durability` ("async")': None}


def wal_commits(path: Path) -> int:
    """The commits in the WAL of the SQLite file at ``path``: its frames that end a transaction (those whose header
    gives the database's size after the commit), of the WAL's current generation (the salts of its header).

    At ``synchronous=FULL`` each is one sync of the WAL; a transaction that changed nothing writes none.
    """
    wal = Path(f"{path}-wal")
    data = wal.read_bytes() if wal.exists() else b""
    if len(data) < 32:
        return 0
    page_size, salts = int.from_bytes(data[8:12], "big"), data[16:24]
    commits, offset = 0, 32
    while offset + 24 + page_size <= len(data):
        header = data[offset : offset + 24]
        if header[8:16] != salts:
            break
        commits += header[4:8] != bytes(4)
        offset += 24 + page_size
    return commits


class OneCommit:
    """The floor: one row committed through Python's ``sqlite3`` alone at ``FULL``, for each half. Measured in the
    rounds, so its time is what one commit and its disk sync cost meanwhile."""

    label = FLOOR

    def __init__(self, path: Path) -> None:
        self.connection = sqlite3.connect(path, isolation_level=None)
        for pragma in ("journal_mode=WAL", "synchronous=FULL"):
            self.connection.execute(f"PRAGMA {pragma}")
        self.connection.execute("CREATE TABLE IF NOT EXISTS runs (id INTEGER PRIMARY KEY, state TEXT NOT NULL)")

    async def park(self, number: int) -> None:
        self.commit(number, "parked")

    async def finish(self, number: int) -> None:
        self.commit(number, "done")

    def commit(self, number: int, state: str) -> None:
        self.connection.execute("BEGIN IMMEDIATE")
        self.connection.execute("INSERT OR REPLACE INTO runs VALUES (?, ?)", (number, state))
        self.connection.execute("COMMIT")


async def peer_connection(side: Any) -> Any:
    """The aiosqlite connection a peer's side writes through."""
    return side.checkpointer.conn if isinstance(side, LangGraphSide) else side.blobs.connection


async def read_synchronous(side: Any) -> int:
    """``PRAGMA synchronous`` as the side's connection reports it (2 is FULL, 1 NORMAL)."""
    if isinstance(side, OneCommit):
        return int(side.connection.execute("PRAGMA synchronous").fetchone()[0])
    if isinstance(side, TarrySide):
        with side.store.db.sync_engine.connect() as connection:  # configured as each of the store's own
            return int(connection.exec_driver_sql("PRAGMA synchronous").scalar_one())
    cursor = await (await peer_connection(side)).execute("PRAGMA synchronous")
    row = await cursor.fetchone()
    return int(row[0])


async def tarry_full(stack: AsyncExitStack, path: Path, side: type[TarrySide], label: str) -> TarrySide:
    store = await stack.enter_async_context(Store(f"sqlite:///{path}"))  # durability="full", the default
    await store.setup()
    return side(label, store)


async def full_sides(stack: AsyncExitStack, folder: Path) -> dict[Path, Any]:
    """Every library's side by the file it writes, every connection at ``synchronous=FULL``."""
    labels = [CHAT_DECIDES, ELSEWHERE, *LANGGRAPH, FLOOR]
    files = {label: folder / f"full-{number}.db" for number, label in enumerate(labels)}
    floor = OneCommit(files[FLOOR])
    stack.callback(floor.connection.close)
    sides: list[Any] = [
        floor,
        await tarry_full(stack, files[CHAT_DECIDES], TarrySide, CHAT_DECIDES),
        await tarry_full(stack, files[ELSEWHERE], DecidedElsewhereSide, ELSEWHERE),
    ]
    if not langgraph_missing():
        for label, mode in LANGGRAPH.items():
            sides.append(await langgraph_sqlite(stack, files[label], mode, label, "FULL"))
    files |= {peer: folder / f"full-{PEERS[peer]}.db" for peer in PEERS}
    others: dict[str, str | Path] = {peer: files[peer] for peer in PEERS}
    sides += await peer_sides(stack, others, synchronous="FULL")
    return {files[side.label]: side for side in sides}


async def rounds(sides: list[Side], count: int, first: int) -> dict[str, dict[str, float]]:
    """``count`` rounds: in each, every side parks chat ``first + round`` and carries it on, the sides' order
    reversed every other round, so each gets the same share of what the machine does meanwhile. Besides the
    latencies, the p50 of the process's CPU time (all its threads) in each half: ``park_cpu_ms``, ``finish_cpu_ms``.
    """
    timings: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for number in range(first, first + count):
        order = sides if number % 2 == 0 else sides[::-1]
        for phase in ("park", "finish"):
            for side in order:
                wall, cpu = time.perf_counter(), time.process_time()
                await getattr(side, phase)(number)
                took = (time.perf_counter() - wall, time.process_time() - cpu)
                timings.setdefault((side.label, phase), []).append(took)
    figures = {}
    for side in sides:
        park, finish = timings[side.label, "park"], timings[side.label, "finish"]
        figures[side.label] = {
            **latency_figures([wall for wall, _ in park], [wall for wall, _ in finish]),
            "park_cpu_ms": statistics.median(cpu for _, cpu in park) * 1000,
            "finish_cpu_ms": statistics.median(cpu for _, cpu in finish) * 1000,
        }
    return figures


async def commits_per_half(side: Any, path: Path, number: int) -> tuple[int, int]:
    """The commits (disk syncs) of parking chat ``number`` and of carrying it on, read from the WAL of ``path``."""
    before = wal_commits(path)
    await side.park(number)
    parked = wal_commits(path)
    await side.finish(number)
    done = wal_commits(path)
    if not before <= parked <= done:
        raise RuntimeError(f"The WAL of {path} started again while its commits were counted: run again")
    return parked - before, done - parked


async def measure(folder: Path, count: int) -> list[dict[str, Any]]:
    """One row per library: its label, ``synchronous`` read back, commits per half, and latency figures."""
    async with AsyncExitStack() as stack:
        files = await full_sides(stack, folder)
        sides = list(files.values())
        await rounds(sides, 1, 0)  # a warm-up round, not measured
        counted = {side.label: await commits_per_half(side, path, 1) for path, side in files.items()}
        figures = await rounds(sides, count, 2)
        return [
            {
                "label": side.label,
                "synchronous": await read_synchronous(side),
                "park_commits": counted[side.label][0],
                "finish_commits": counted[side.label][1],
                **figures[side.label],
            }
            for side in sides
        ]


def full_sync_figures(folder: Path, count: int) -> list[dict[str, Any]]:
    """The rows of :func:`measure`."""
    return asyncio.run(measure(folder, count))
