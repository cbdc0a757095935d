"""The bridges' added cost per round trip, over each library saving its own run state (pydantic-ai, the Agents SDK).

Run from the repository root: ``python bench/bridge_bench.py [--postgres URL] [--rounds N] [--out FILE]``.

One round trip: a run that stops on an approval, persisted; the approval; a fresh agent that loads the run
and carries it on to its final reply, persisted again. Each library alone (``peers.PydanticAiSide``: the
message history saved as JSON and ``DeferredToolResults`` built by hand; ``peers.AgentsSdkSide``: the
``RunState`` string saved, loaded, approved and run on), one row per run. Through its bridge:
``bridge.park``, ``Store.approve`` and ``continue_chat`` (the question listed, decided once and trailed; the
run carried on under the chat's turn claim). Each pair uses the same scripted model (no network) in one
process, one round trip at a time, interleaved.
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
from typing import Any
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from peers import AgentsSdkSide, Blobs, PydanticAiSide  # noqa: E402

from tarry.bridges.openai_agents import OpenAIAgentsBridge  # noqa: E402
from tarry.bridges.pydantic_ai import PydanticAIBridge  # noqa: E402
from tarry.jobs import continue_chat  # noqa: E402
from tarry.store import Store  # noqa: E402


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

    async def park(self, number: int) -> None:
        chat = await self.starter.park(self.store, await self.library.run(self.starter))
        self.chats[number] = chat.id

    async def approve(self, number: int) -> None:
        (question,) = await self.store.pending_questions(self.chats[number])
        assert await self.store.approve(question.id)

    async def finish(self, number: int) -> None:
        bridge = self.library.bridge()  # a fresh agent, as a fresh process builds
        assert await continue_chat(self.store, self.chats[number], [bridge.agent]) is None


async def timed(steps: list[Any], number: int) -> float:
    """Seconds the steps of round trip ``number`` take, one after the other."""
    began = time.perf_counter()
    for step in steps:
        await step(number)
    return time.perf_counter() - began


async def measure(where: str, url: str, blobs_place: str | Path, rounds: int) -> dict[str, list[float]]:
    """Round-trip times of each library alone and through its bridge on one database, all interleaved so load
    falls on each alike."""
    times: dict[str, list[float]] = {}
    async with AsyncExitStack() as stack:
        blobs = await Blobs.open(stack, blobs_place)
        store = await stack.enter_async_context(Store(url))
        await store.setup()
        pairs = [(library, library.alone(blobs), BridgeSide(store, library)) for library in LIBRARIES]
        for number in range(-2, rounds):  # two warm-up rounds each, not counted
            for library, alone, bridged in pairs:
                took_alone = await timed([alone.park, alone.finish], number)
                took_bridged = await timed([bridged.park, bridged.approve, bridged.finish], number)
                if number >= 0:
                    times.setdefault(f"{library.name} alone", []).append(took_alone)
                    times.setdefault(f"{library.name} through the bridge", []).append(took_bridged)
    print(f"{where}: measured {rounds} round trips each", file=sys.stderr)
    return times


def row(where: str, side: str, times: list[float], base: list[float] | None) -> str:
    median, p90 = statistics.median(times), statistics.quantiles(times, n=10)[-1] if len(times) > 1 else times[0]
    added = "" if base is None else f"{(median - statistics.median(base)) * 1000:+.1f} ms"
    return f"| {where} | {side} | {median * 1000:.1f} ms | {p90 * 1000:.1f} ms | {added} |"


def page(results: dict[str, dict[str, list[float]]], rounds: int, started: float, load: float) -> str:
    versions = ", ".join(f"{library.package} {version(library.package)}" for library in LIBRARIES)
    lines = [
        "# Benchmarks: the bridges",
        "",
        "Written by `python bench/bridge_bench.py`; the numbers below are from its last run.",
        "",
        f"Machine: {platform.platform()}, Python {platform.python_version()}, {os.cpu_count()} CPUs, load"
        f" {load:.2f} at the start. {versions}. {rounds} round trips per row,"
        f" in {time.perf_counter() - started:.0f} s.",
        "",
        "One round trip: a run that stops on an approval, persisted; the approval; a fresh agent that carries"
        " the run on to its final reply, persisted. Each library alone saves its run's state as JSON, one row"
        " per run (`bench/peers.py`): pydantic-ai its message history, with `DeferredToolResults` built by hand;"
        " the Agents SDK its `RunState` string, loaded, approved and run on. No listing, no single-use"
        " decision, no trail, no claim. Through the bridge: `bridge.park`, `Store.approve` (the question"
        " found with `pending_questions`) and `continue_chat`, with all of those. Same scripted model per"
        " library, one process, one round trip at a time; all four sides alternate. On SQLite, tarry commits"
        ' with its default `durability="full"` (a disk sync per commit) while the rows of the libraries alone'
        " use WAL with `synchronous=NORMAL` (no sync per commit), as in the store benchmark.",
        "",
        "| database | | median | p90 | added per round trip |",
        "|---|---|---|---|---|",
    ]
    for where, times in results.items():
        for library in LIBRARIES:
            alone = times[f"{library.name} alone"]
            lines.append(row(where, f"{library.name} alone", alone, None))
            bridged = times[f"{library.name} through the bridge"]
            lines.append(row(where, f"{library.name} through the bridge", bridged, alone))
    lines += [
        "",
        "The added time is tarry's: the chat's rows written when the run parks (the chat, its messages, a call"
        " and a question per deferred call), the decision's transaction and trail row, and carrying on (loading"
        " the chat, claiming the call and the turn, writing the results and the reply), each a transaction of"
        " its own, with the run's whole history (pydantic-ai) or `RunState` (the Agents SDK) kept in the parked"
        " message.",
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
    results = {
        "SQLite file": await measure("SQLite", f"sqlite:///{folder / 'tarry.db'}", folder / "runs.db", arguments.rounds)
    }
    if arguments.postgres:
        import psycopg

        schema = f"bridge_bench_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(arguments.postgres, autocommit=True) as connection:
            connection.execute(f'CREATE SCHEMA "{schema}"')
        try:
            separator = "&" if "?" in arguments.postgres else "?"
            url = f"{arguments.postgres}{separator}options={quote(f'-csearch_path={schema}')}"
            results["PostgreSQL"] = await measure("PostgreSQL", url, url, arguments.rounds)
        finally:
            with psycopg.connect(arguments.postgres, autocommit=True) as connection:
                connection.execute(f'DROP SCHEMA "{schema}" CASCADE')
    Path(arguments.out).write_text(page(results, arguments.rounds, started, load))
    print(Path(arguments.out).read_text())


if __name__ == "__main__":
    asyncio.run(main())
