"""Batched task checks in real worker processes, one of them killed with SIGKILL: no task is checked twice at
once, no check's save is lost, no task is left stuck, and every chat ends with its model's reply."""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import time
from collections import defaultdict
from pathlib import Path

import pytest

from tarry import Agent, Task, Tool
from tarry.jobs import Worker
from tarry.live import current_call
from tarry.store import Store
from tarry.testing import ScriptedModel
from tarry.tools import ask
from tests.jobs.helpers import claims_left, finish, finished_chats, start_worker, wait_until
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


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
async def test_batched_checks_with_a_worker_killed_never_overlap_lose_a_check_or_stick(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.db'}" if kind == "sqlite" else request.getfixturevalue("postgres_url")
    markers = tmp_path / "markers"
    orders = await counting_chats(url)
    workers = [start_worker(url, markers, lease=2.0) for _ in range(3)]
    victim = workers[0]

    def under_way() -> bool:
        text = markers.read_text() if markers.exists() else ""
        return f":{victim.pid}:" in text and text.count("count-end") > 150

    wait_until(under_way, 60, "the workers checking tasks")
    victim.kill()
    killed_at = time.time()
    victim.wait()
    deadline = time.monotonic() + 120
    while await finished_chats(url) < CHATS:
        assert time.monotonic() < deadline, f"only {await finished_chats(url)} of {CHATS} chats finished"
        await asyncio.sleep(0.1)
    for worker in workers[1:]:
        worker.terminate()
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
    # Most checks were batched: a regression that gave every chat a full step would check none in a batch.
    ended = sum(1 for line in markers.read_text().splitlines() if line.startswith("count-end "))
    batched = batched_checks(tmp_path)
    assert batched >= ended // 2, f"only {batched} of {ended} checks were batched"


def batched_checks(folder: Path) -> int:
    """How many task checks the workers whose logs are in ``folder`` logged as checked in a batch."""
    logs = "".join(path.read_text() for path in folder.glob("process-*.err"))
    return sum(int(count) for count in re.findall(r"Checked (\d+) task\(s\) of \d+ chat\(s\) in a batch", logs))


class AsksOnThirdCheck(Tool):
    """A task whose third check asks a person which colour, as it runs (``current_call``), and ends with the answer."""

    def execute(self) -> Task:
        return Task(poll_interval=0.05, data={"checks": 0})

    async def resume(self, task: Task) -> str | Task:
        checks = task.data["checks"] + 1
        CHECKED.append(checks)
        if checks < 3:
            return Task(poll_interval=0.05, data={"checks": checks})
        live = current_call.get()
        assert live is not None
        answered = await live.ask(ask("Which colour?", colour=str))
        return f"colour {answered.answer['colour']} after {checks} checks"  # type: ignore[index]


CHECKED: list[int] = []


async def test_a_check_that_asks_as_it_runs_is_run_again_by_a_full_step_which_records_the_question(
    tmp_path: Path,
) -> None:
    CHECKED.clear()
    model = ScriptedModel([[{"name": "asks_on_third_check", "arguments": {}}], "Done."])
    agent = Agent("painter", model=lambda: model, tools=[AsksOnThirdCheck()])
    async with Store(f"sqlite:///{tmp_path / 'jobs.db'}") as store:
        await store.setup()
        chat = await store.create_chat(agent=agent)
        await chat.ask("Paint it")
        worker = Worker(store, [agent], poll_interval=0.05)
        running = asyncio.create_task(worker.run())
        deadline = time.monotonic() + 30
        while not (asked := await store.pending_questions(chat.id)):
            assert time.monotonic() < deadline, "the question was never recorded"
            await asyncio.sleep(0.02)
        assert await store.answer(asked[0].id, {"colour": "red"})
        while (chat := await store.load_chat(chat.id, model, agent.tools)).messages[-1].content != "Done.":
            assert time.monotonic() < deadline, "the chat never finished"
            await asyncio.sleep(0.02)
        worker.stop()
        await running
    assert chat.messages[2].content == "colour red after 3 checks"
    # The batched check's third run asked, gave the call back unsaved; the full step ran the third check again.
    assert CHECKED == [1, 2, 3, 3]
    assert worker.checks >= 2
