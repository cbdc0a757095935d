"""Batched task checks in real worker processes, one of them killed with SIGKILL (``tests.jobs.counting``), and a
check that asks a person something as it runs."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import pytest

from tarry import Agent, Task, Tool
from tarry.jobs import Worker
from tarry.live import current_call
from tarry.store import Store
from tarry.testing import ScriptedModel
from tarry.tools import ask
from tests.jobs.counting import counting_chats, kill_one_while_counting_then_check
from tests.jobs.helpers import start_worker


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
async def test_batched_checks_with_a_worker_killed_never_overlap_lose_a_check_or_stick(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.db'}" if kind == "sqlite" else request.getfixturevalue("postgres_url")
    markers = tmp_path / "markers"
    orders = await counting_chats(url)
    workers = [start_worker(url, markers, lease=2.0) for _ in range(3)]
    await kill_one_while_counting_then_check(url, markers, workers, orders)
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
