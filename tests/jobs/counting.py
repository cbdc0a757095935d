"""Chats whose tasks count their checks, and the check of what workers made of them with one worker SIGKILLed: no
task is checked twice at once, no check's save is lost, no task is left stuck, and every chat ends with its model's
reply. Shared by the batched checks' tests of ``tarry worker`` and of Celery workers."""

from __future__ import annotations

import itertools
import json
import subprocess
import time
from collections import defaultdict
from pathlib import Path

from tarry.store import Store
from tests.jobs.helpers import all_finished, claims_left, finish, wait_until
from tests.jobs.tools import clerk

CHATS = 40
CHECKS = 20


def counted(order: str, slow: float = 0.0) -> dict[str, object]:
    return {"name": "counted", "arguments": {"order": order, "checks": CHECKS, "slow": slow}}


async def counting_chats(url: str) -> list[str]:
    """``CHATS`` parked chats: every other one waits on two counted tasks, the rest on one; one task in eight has a
    check that outlasts the workers' lease (2 s), so its claim must be renewed while it runs."""
    orders = []
    async with Store(url) as store:
        await store.setup()
        for number in range(CHATS):
            calls = [counted(f"o{number}a")] + (
                [counted(f"o{number}b", 3.0 if number % 4 == 1 else 0.0)] if number % 2 else []
            )
            chat = await store.create_chat(agent=clerk())
            await chat.ask(json.dumps(calls))
            assert chat.waiting
            orders += [call["arguments"]["order"] for call in calls]  # type: ignore[index]
    return orders


def checks_by_order(markers: Path) -> dict[str, list[tuple[str, int, float, float | None]]]:
    """Each order's checks as (process, count seen, start, end or ``None`` when its process died in it)."""
    starts: dict[tuple[str, str, int], float] = {}
    ends: dict[tuple[str, str, int], float] = {}
    for line in markers.read_text().splitlines():
        kind, what, at = line.split(" ")
        if kind in ("count-start", "count-end"):
            order, pid, seen = what.split(":")
            key = (order, pid, int(seen))
            # A process that checks the same count twice (a reclaimed, idempotent call) keeps its first start.
            (starts if kind == "count-start" else ends).setdefault(key, float(at))
    found: dict[str, list[tuple[str, int, float, float | None]]] = defaultdict(list)
    for (order, pid, seen), began in starts.items():
        found[order].append((pid, seen, began, ends.get((order, pid, seen))))
    return found


async def kill_one_while_counting_then_check(
    url: str, markers: Path, workers: list[subprocess.Popen[str]], orders: list[str]
) -> None:
    """SIGKILL the first of ``workers`` once it checks tasks and 150 checks ended; once every chat finished, stop the
    others and check every order's checks: none overlapped, every count was seen once by a check that ended (again
    only when the killed process saw it first), and nothing stays claimed."""
    victim = workers[0]

    def under_way() -> bool:
        text = markers.read_text() if markers.exists() else ""
        return f":{victim.pid}:" in text and text.count("count-end") > 150

    wait_until(under_way, 60, "the workers checking tasks")
    victim.kill()
    killed_at = time.time()
    victim.wait()
    try:
        await all_finished(url, CHATS, 120)
    finally:
        for worker in workers[1:]:
            worker.terminate()
    for worker in workers[1:]:
        finish(worker)

    checks = checks_by_order(markers)
    assert sorted(checks) == sorted(orders)
    for order, runs in checks.items():
        spans = sorted((began, end if end is not None else killed_at, pid) for pid, _, began, end in runs)
        for (_, first_end, first), (second_start, _, second) in itertools.pairwise(spans):
            assert first_end <= second_start, f"{order}: checks by {first} and {second} overlapped"
        unfinished = [run for run in runs if run[3] is None]
        assert all(pid == str(victim.pid) for pid, *_ in unfinished), f"{order}: a live worker left a check unended"
        # Every count is seen by a check that ended (none stuck, none skipped), and saved once: a count is checked
        # again only when the process that checked it died before it saved.
        ended = [(seen, pid) for pid, seen, _, end in runs if end is not None]
        assert sorted({seen for seen, _ in ended}) == list(range(CHECKS)), f"{order}: counts seen {sorted(ended)}"
        for count in {seen for seen, _ in ended}:
            by = [pid for seen, pid in ended if seen == count]
            assert len(by) == 1 or str(victim.pid) in by, f"{order}: count {count} was checked by {by}"
    assert await claims_left(url) == []
