"""Starting workers and reading what they left: shared by the cross-process jobs tests."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import Connection, func, or_, select

from tarry.clock import utcnow
from tarry.store import Store
from tarry.store.tables import chats, messages, tool_calls
from tests.jobs.tools import clerk, order_calls

ROOT = Path(__file__).resolve().parents[2]
CHATS = int(os.environ.get("TARRY_TEST_JOBS_CHATS", "200"))
"""How many chats the must-hold tests carry on (the issue's 200 by default)."""


def environment(markers: Path) -> dict[str, str]:
    path = os.pathsep.join([str(ROOT / "src"), str(ROOT)])  # the tree's own code, not an installed tarry
    return {**os.environ, "TARRY_TEST_MARKERS": str(markers), "PYTHONPATH": path}


def start(command: list[str], markers: Path) -> subprocess.Popen[str]:
    """Start ``command``; its output goes to files next to ``markers`` (a full pipe would block a chatty worker)."""
    number = len(list(markers.parent.glob("process-*.out")))
    out = open(markers.parent / f"process-{number}.out", "w+")  # noqa: SIM115 - closed in finish()
    err = open(markers.parent / f"process-{number}.err", "w+")  # noqa: SIM115
    process = subprocess.Popen(command, cwd=ROOT, env=environment(markers), stdout=out, stderr=err, text=True)
    process.files = (out, err)  # type: ignore[attr-defined]
    return process


def start_worker(url: str, markers: Path, lease: float = 3.0, concurrency: int = 8) -> subprocess.Popen[str]:
    """``tarry worker`` for the clerk agent, in its own process."""
    return start(
        [sys.executable, "-m", "tarry.cli", "worker", "--agents", "tests.jobs.tools:clerk", "--url", url,
         "--lease", str(lease), "--concurrency", str(concurrency)],
        markers,
    )  # fmt: skip


def start_proc(markers: Path, *args: str) -> subprocess.Popen[str]:
    return start([sys.executable, "-m", "tests.jobs.proc", *args], markers)


def finish(process: subprocess.Popen[str], timeout: float = 60) -> str:
    """Wait for ``process`` to exit 0; returns its standard output."""
    process.wait(timeout=timeout)
    out, err = process.files  # type: ignore[attr-defined]
    out.seek(0)
    err.seek(0)
    output, errors = out.read(), err.read()
    out.close()
    err.close()
    assert process.returncode == 0, f"exit {process.returncode}: {errors[-3000:]}"
    return str(output)


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout} s"
        time.sleep(0.05)


def markers_of(markers: Path, kind: str) -> list[str]:
    if not markers.exists():
        return []
    return [line.split(" ")[1] for line in markers.read_text().splitlines() if line.startswith(kind + " ")]


async def create_orders(url: str, orders: list[tuple[str, float]], poll: float = 0.2) -> dict[str, str]:
    """One parked chat per order (an approval, a question and a build wait); returns order -> chat id."""
    made = {}
    async with Store(url) as store:
        await store.setup()
        for order, seconds in orders:
            chat = await store.create_chat(agent=clerk())
            await chat.ask(json.dumps(order_calls(order, seconds, poll)))
            assert chat.waiting
            made[order] = chat.id
    return made


async def finished_chats(url: str) -> int:
    """How many chats ended with the clerk's final reply."""
    query = select(func.count()).where(messages.c.role == "assistant", messages.c.content.like("Done after%"))
    async with Store(url) as store:
        found = await store.db.run_read(lambda connection: connection.scalar(query))
    return int(found or 0)


async def all_finished(url: str, chats: int, within: float) -> None:
    """Wait until ``chats`` chats ended with the clerk's final reply; fail after ``within`` seconds."""
    deadline = time.monotonic() + within
    while await finished_chats(url) < chats:
        assert time.monotonic() < deadline, f"only {await finished_chats(url)} of {chats} chats finished"
        await asyncio.sleep(0.1)


async def claims_left(url: str) -> list[str]:
    """Calls and chats still claimed (lease not run out), and open calls left claimed by a dead process."""
    now = utcnow()
    calls = select(tool_calls.c.name, tool_calls.c.claimed_until, tool_calls.c.result_message_id).where(
        tool_calls.c.claimed_by.is_not(None),
        or_(tool_calls.c.claimed_until > now, tool_calls.c.result_message_id.is_(None)),
    )
    turns = select(chats.c.id, chats.c.claimed_until).where(
        chats.c.claimed_by.is_not(None), chats.c.claimed_until > now
    )

    def read(connection: Connection) -> list[str]:
        return [f"call {row}" for row in connection.execute(calls)] + [
            f"chat {row}" for row in connection.execute(turns)
        ]

    async with Store(url) as store:
        return await store.db.run_read(read)


async def results_by_order(url: str, chat_ids: dict[str, str]) -> dict[str, dict[str, str]]:
    """Each order's tool results by tool name, and its final reply under ``"reply"``."""
    found: dict[str, dict[str, str]] = {}
    async with Store(url) as store:
        for order, chat_id in chat_ids.items():
            chat = await store.load_chat(chat_id)
            names = {record.call.id: record.call.name for record in chat.records.values()}
            results = {names[m.tool_call_id]: m.content for m in chat.messages if m.role == "tool" and m.tool_call_id}
            results["reply"] = chat.messages[-1].content
            found[order] = results
    return found


def check_exactly_once(markers: Path, results: dict[str, dict[str, str]], answers: list[dict[str, str]]) -> None:
    """Every chat has its final reply; every transfer ran once; every answer reached its tool."""
    assert all(found["reply"] == "Done after 3 results." for found in results.values())
    transfers = Counter(markers_of(markers, "transfer"))
    interrupted = [order for order, found in results.items() if "interrupted" in found["transfer"]]
    for order, found in results.items():
        if order in interrupted:
            assert transfers[order] <= 1
        else:
            assert transfers[order] == 1, f"{order}: transfer ran {transfers[order]} times"
            assert found["transfer"].startswith(f"Sent 5 to {order}")
    sizes = {answer["order"]: answer["value"] for answer in answers if answer["kind"] == "form"}
    assert len(sizes) == len(results) and sum(a["kind"] == "approval" for a in answers) == len(results)
    lost = [
        order
        for order, found in results.items()
        if "interrupted" not in found["pick_size"] and found["pick_size"] != f"{order}: size {sizes[order]}"
    ]
    assert not lost, f"answers lost: {lost[:5]}"
    assert all("built after" in found["build"] for found in results.values())
    cut = [order for order, found in results.items() if "interrupted" in found["pick_size"] + found["transfer"]]
    assert len(cut) <= 16, f"too many calls interrupted: {len(cut)}"


async def kill_one_midway_then_check(
    url: str,
    markers: Path,
    workers: list[subprocess.Popen[str]],
    answerer: subprocess.Popen[str],
    chat_ids: dict[str, str],
    *,
    first_answers_within: float,
) -> None:
    """SIGKILL the first worker once a third of the answers reached their tools; then every chat must
    finish, every tool must have run exactly once, and nothing may stay claimed."""
    chats = len(chat_ids)
    try:
        wait_until(
            lambda: len(markers_of(markers, "size")) >= chats // 3,
            first_answers_within,
            "a third of the answers reaching tools",
        )
        workers[0].send_signal(signal.SIGKILL)
        answers = json.loads(finish(answerer, timeout=180))
        await all_finished(url, chats, 180)
    finally:
        for worker in workers[1:]:
            worker.send_signal(signal.SIGTERM)
    for worker in workers[1:]:
        finish(worker)
    assert workers[0].wait() == -signal.SIGKILL
    check_exactly_once(markers, await results_by_order(url, chat_ids), answers)
    assert await claims_left(url) == []
