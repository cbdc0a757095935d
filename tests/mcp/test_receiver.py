"""tarry as the receiver of task-augmented requests (2025-11-25): ``TaskReceiver`` and its tasks."""

from __future__ import annotations

import asyncio
import base64
import re
import secrets
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError

from tarry.mcp import TaskReceiver
from tarry.mcp.receiver import RELATED_TASK, ReceivedTask

ISO_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")
START = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


class Person:
    """Work that answers once the test lets it: ``release`` with the ElicitResult (or an exception)."""

    def __init__(self) -> None:
        self.asked: list[Mapping[str, Any]] = []
        self.answer: asyncio.Future[dict[str, Any]] | None = None
        self.stopped = asyncio.Event()

    async def __call__(self, params: Mapping[str, Any]) -> dict[str, Any]:
        self.asked.append(params)
        self.answer = asyncio.get_running_loop().create_future()
        try:
            return await self.answer
        finally:
            self.stopped.set()

    async def asked_once(self) -> None:
        while self.answer is None:
            await asyncio.sleep(0)


def parse(moment: str) -> datetime:
    return datetime.fromisoformat(moment.replace("Z", "+00:00"))


def error_code(error: pytest.ExceptionInfo[MCPError]) -> int:
    return error.value.error.code


ELICIT = {"mode": "form", "message": "Your name?", "requestedSchema": {"type": "object", "properties": {}}}


async def test_ids_carry_at_least_128_random_bits_from_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[str] = []
    original = secrets.token_urlsafe

    def spy(nbytes: int | None = None) -> str:
        made.append(original(nbytes))
        return made[-1]

    monkeypatch.setattr(secrets, "token_urlsafe", spy)
    receiver = TaskReceiver(Person())
    ids = [receiver.start(ELICIT, None)["task"]["taskId"] for _ in range(200)]
    assert ids == made, "every id comes from secrets"
    assert len(set(ids)) == 200
    for task_id in ids:
        raw = base64.urlsafe_b64decode(task_id + "=" * (-len(task_id) % 4))
        assert len(raw) * 8 >= 128
    receiver.close()


async def test_created_task_has_iso_utc_times_ttl_and_poll_interval() -> None:
    clock = Clock()
    receiver = TaskReceiver(Person(), poll_ms=750, now=clock)
    task = receiver.start(ELICIT, 30_000)["task"]
    assert task["status"] == "working"
    assert ISO_UTC.match(task["createdAt"])
    assert ISO_UTC.match(task["lastUpdatedAt"])
    assert parse(task["createdAt"]) == START
    assert task["ttl"] == 30_000
    assert task["pollInterval"] == 750
    receiver.close()


async def test_ttl_defaults_and_is_clamped() -> None:
    receiver = TaskReceiver(Person(), default_ttl_ms=5_000, max_ttl_ms=60_000)
    assert receiver.start(ELICIT, None)["task"]["ttl"] == 5_000
    assert receiver.start(ELICIT, 10**9)["task"]["ttl"] == 60_000
    assert receiver.start(ELICIT, True)["task"]["ttl"] == 5_000  # not a number of ms
    receiver.close()


async def test_ttl_runs_from_creation_and_an_expired_task_is_gone() -> None:
    clock, person = Clock(), Person()
    receiver = TaskReceiver(person, now=clock)
    task_id = receiver.start(ELICIT, 1_000)["task"]["taskId"]
    await person.asked_once()
    clock.advance(milliseconds=600)
    assert person.answer is not None
    person.answer.set_result({"action": "accept", "content": {}})
    await person.stopped.wait()
    done = await receiver.serve("tasks/get", {"taskId": task_id})
    assert done["status"] == "completed"
    assert parse(done["lastUpdatedAt"]) == START + timedelta(milliseconds=600)
    clock.advance(milliseconds=399)
    assert (await receiver.serve("tasks/get", {"taskId": task_id}))["status"] == "completed"
    clock.advance(milliseconds=1)  # 1000 ms after creation, though only 400 ms after it completed
    for method in ("tasks/get", "tasks/result", "tasks/cancel"):
        with pytest.raises(MCPError) as raised:
            await receiver.serve(method, {"taskId": task_id})
        assert error_code(raised) == types.INVALID_PARAMS


async def test_an_expired_working_task_stops_its_work() -> None:
    clock, person = Clock(), Person()
    receiver = TaskReceiver(person, now=clock)
    task_id = receiver.start(ELICIT, 1_000)["task"]["taskId"]
    await person.asked_once()
    clock.advance(seconds=2)
    with pytest.raises(MCPError) as raised:
        await receiver.serve("tasks/get", {"taskId": task_id})
    assert error_code(raised) == types.INVALID_PARAMS
    await asyncio.wait_for(person.stopped.wait(), 10)


@pytest.mark.parametrize("method", ["tasks/get", "tasks/result", "tasks/cancel"])
@pytest.mark.parametrize("params", [{"taskId": "no-such-task"}, {"taskId": 7}, {}, None])
async def test_unknown_ids_are_invalid_params(method: str, params: dict[str, Any] | None) -> None:
    receiver = TaskReceiver(Person())
    receiver.start(ELICIT, None)
    with pytest.raises(MCPError) as raised:
        await receiver.serve(method, params)
    assert error_code(raised) == types.INVALID_PARAMS
    assert "not found" in raised.value.error.message
    receiver.close()


async def test_other_task_methods_are_not_served() -> None:
    receiver = TaskReceiver(Person())
    with pytest.raises(MCPError) as raised:
        await receiver.serve("tasks/list", {})
    assert error_code(raised) == types.METHOD_NOT_FOUND


async def test_cancel_stops_the_work_and_a_terminal_task_cannot_be_cancelled() -> None:
    person = Person()
    receiver = TaskReceiver(person)
    task_id = receiver.start(ELICIT, None)["task"]["taskId"]
    await person.asked_once()
    cancelled = await receiver.serve("tasks/cancel", {"taskId": task_id})
    assert cancelled["status"] == "cancelled"
    await asyncio.wait_for(person.stopped.wait(), 10)
    assert (await receiver.serve("tasks/get", {"taskId": task_id}))["status"] == "cancelled"
    with pytest.raises(MCPError) as raised:
        await receiver.serve("tasks/cancel", {"taskId": task_id})
    assert error_code(raised) == types.INVALID_PARAMS
    assert "terminal status 'cancelled'" in raised.value.error.message
    with pytest.raises(MCPError) as raised:
        await receiver.serve("tasks/result", {"taskId": task_id})
    assert error_code(raised) == types.INVALID_PARAMS


async def test_a_completed_task_cannot_be_cancelled() -> None:
    person = Person()
    receiver = TaskReceiver(person)
    task_id = receiver.start(ELICIT, None)["task"]["taskId"]
    await person.asked_once()
    assert person.answer is not None
    person.answer.set_result({"action": "decline"})
    await person.stopped.wait()
    with pytest.raises(MCPError) as raised:
        await receiver.serve("tasks/cancel", {"taskId": task_id})
    assert error_code(raised) == types.INVALID_PARAMS
    assert "terminal status 'completed'" in raised.value.error.message
    assert (await receiver.serve("tasks/get", {"taskId": task_id}))["status"] == "completed"
    receiver.close()


async def test_tasks_result_blocks_until_the_task_is_terminal() -> None:
    person = Person()
    receiver = TaskReceiver(person)
    task_id = receiver.start(ELICIT, None)["task"]["taskId"]
    waiting = asyncio.create_task(receiver.serve("tasks/result", {"taskId": task_id}))
    await person.asked_once()
    for _ in range(20):
        await asyncio.sleep(0)  # let every ready callback run: the answer is not there, so neither is the result
    assert not waiting.done()
    assert (await receiver.serve("tasks/get", {"taskId": task_id}))["status"] == "working"
    assert person.answer is not None
    person.answer.set_result({"action": "accept", "content": {"name": "Ada"}})
    result = await asyncio.wait_for(waiting, 10)
    assert result == {"action": "accept", "content": {"name": "Ada"}, "_meta": {RELATED_TASK: {"taskId": task_id}}}
    assert person.asked == [ELICIT]
    receiver.close()


async def test_a_failed_work_answers_tasks_result_with_its_error() -> None:
    person = Person()
    receiver = TaskReceiver(person)
    task_id = receiver.start(ELICIT, None)["task"]["taskId"]
    await person.asked_once()
    assert person.answer is not None
    person.answer.set_exception(MCPError(types.INVALID_PARAMS, "Unsupported elicitation mode"))
    with pytest.raises(MCPError) as raised:
        await receiver.serve("tasks/result", {"taskId": task_id})
    assert error_code(raised) == types.INVALID_PARAMS
    assert raised.value.error.message == "Unsupported elicitation mode"
    got = await receiver.serve("tasks/get", {"taskId": task_id})
    assert got["status"] == "failed"
    assert got["statusMessage"] == "Unsupported elicitation mode"


async def test_an_unexpected_work_error_is_an_internal_error_that_leaks_nothing() -> None:
    person = Person()
    receiver = TaskReceiver(person)
    task_id = receiver.start(ELICIT, None)["task"]["taskId"]
    await person.asked_once()
    assert person.answer is not None
    person.answer.set_exception(RuntimeError("secret-token-123"))
    with pytest.raises(MCPError) as raised:
        await receiver.serve("tasks/result", {"taskId": task_id})
    assert error_code(raised) == types.INTERNAL_ERROR
    assert "secret-token-123" not in raised.value.error.message


LEGAL = {
    ("working", "input_required"),
    ("working", "completed"),
    ("working", "failed"),
    ("working", "cancelled"),
    ("input_required", "working"),
    ("input_required", "completed"),
    ("input_required", "failed"),
    ("input_required", "cancelled"),
}
STATUSES = ("working", "input_required", "completed", "failed", "cancelled")


@pytest.mark.parametrize("before", STATUSES)
@pytest.mark.parametrize("after", STATUSES)
def test_only_legal_status_transitions(before: str, after: str) -> None:
    task = ReceivedTask("t", START, 1_000, 500)
    task.status = before
    later = START + timedelta(seconds=1)
    moved = task.move(after, later, "why")
    assert moved is ((before, after) in LEGAL)
    assert task.status == (after if moved else before)
    assert task.last_updated_at == (later if moved else START)
    assert task.finished.is_set() is (moved and after in ("completed", "failed", "cancelled"))
