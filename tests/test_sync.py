"""The _sync twins: one shared helper, one event loop per thread kept between calls."""

from __future__ import annotations

import asyncio
import inspect
import subprocess
import sys
import threading
from typing import Any

import pytest

from tarry import Chat, Message, Task, Tool, tool
from tarry.errors import TarryError
from tarry.testing import ScriptedModel

VERBS = ["ask", "complete", "step", "pending_questions", "pending_tasks", "answer", "approve", "decline", "cancel"]


class Gate(Tool):
    """Needs approval."""

    requires_approval = True

    def execute(self) -> str:
        return "opened"


class Slow(Tool):
    """Finishes on the next complete()."""

    def execute(self) -> Task:
        return Task(data={"id": 1})

    def resume(self, task: Task) -> str:
        return "finished later"


@pytest.mark.parametrize("verb", VERBS)
def test_every_verb_has_a_sync_twin_with_its_signature(verb: str) -> None:
    twin = getattr(Chat, f"{verb}_sync")
    original = getattr(Chat, verb)
    assert twin.__name__ == f"{verb}_sync"
    assert not inspect.iscoroutinefunction(twin)
    assert inspect.signature(twin).parameters.keys() == inspect.signature(original).parameters.keys()
    assert twin.__doc__


def test_a_whole_chat_in_sync_code() -> None:
    turn = [{"name": "gate", "arguments": {}}, {"name": "slow", "arguments": {}}]
    chat = Chat(model=ScriptedModel([turn, "all done"]), tools=[Gate(), Slow()])
    parked = chat.ask_sync("go")
    assert parked is not None
    assert len(parked.tool_calls) == 2
    [question] = chat.pending_questions_sync()
    [task] = chat.pending_tasks_sync()
    assert task.data == {"id": 1}
    assert chat.approve_sync(question) is True
    assert chat.approve_sync(question) is False
    reply = chat.complete_sync()
    assert reply == Message("assistant", "all done")
    assert sorted(m.content for m in chat.messages if m.role == "tool") == ["finished later", "opened"]


def test_sync_answer_decline_step_and_cancel() -> None:
    class Ask(Tool):
        """Asks a number."""

        def execute(self) -> Task:
            return self.ask("How many?", n=int)

        def resume(self, task: Task) -> Any:
            return task.answer

    model = ScriptedModel([[{"name": "ask", "arguments": {}}], "one", [{"name": "gate", "arguments": {}}], "two"])
    chat = Chat(model=model, tools=[Ask(), Gate()])
    chat.ask_sync("first")
    [question] = chat.pending_questions_sync()
    assert chat.answer_sync(question, "4") is True
    assert chat.step_sync() == Message("assistant", "one")
    chat.ask_sync("second")
    [approval] = chat.pending_questions_sync()
    assert chat.decline_sync(approval, "no") is True
    chat.cancel_sync()
    assert chat.complete_sync() == Message("assistant", "two")
    results = [m.result() for m in chat.messages if m.role == "tool"]
    assert results == [{"n": 4}, {"error": "The user declined the gate call.", "note": "no"}]


async def test_sync_twins_inside_a_running_loop_say_to_await() -> None:
    chat = Chat(model=ScriptedModel(["hi"]))
    with pytest.raises(TarryError, match=r"await chat\.ask"):
        chat.ask_sync("hello")
    with pytest.raises(TarryError, match=r"await chat\.complete"):
        chat.complete_sync()
    # Nothing was recorded, and the async verb still works.
    assert chat.messages == []
    assert await chat.ask("hello") == Message("assistant", "hi")


def test_one_event_loop_per_thread_survives_between_calls() -> None:
    loops: list[asyncio.AbstractEventLoop] = []
    shared: dict[str, asyncio.Queue[str]] = {}

    @tool
    async def remember(text: str) -> str:
        """Puts text on a queue made by the first call: it only works on the loop that made it."""
        loops.append(asyncio.get_running_loop())
        queue = shared.setdefault("queue", asyncio.Queue())
        await queue.put(text)
        return str(queue.qsize())

    def chat() -> Chat:
        return Chat(model=ScriptedModel([[{"name": "remember", "arguments": {"text": "x"}}], "ok"]), tools=[remember])

    chat().ask_sync("one")
    chat().ask_sync("two")
    assert loops[0] is loops[1]
    assert not loops[0].is_closed()
    assert shared["queue"].qsize() == 2

    # Another thread gets its own loop.
    def in_thread() -> None:
        own = Chat(model=ScriptedModel([[{"name": "remember", "arguments": {"text": "y"}}], "ok"]), tools=[remember])
        shared.pop("queue")
        own.ask_sync("three")

    thread = threading.Thread(target=in_thread)
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert loops[2] is not loops[0]
    chat().ask_sync("four")
    assert loops[3] is loops[0]


def test_errors_pass_through_the_sync_twin() -> None:
    chat = Chat(model=ScriptedModel([]))
    with pytest.raises(TarryError, match="ran out of turns"):
        chat.ask_sync("hello")
    with pytest.raises(ValueError, match="ask"):
        chat.ask_sync("")


def test_a_program_that_exits_while_a_daemon_thread_runs_a_sync_verb_exits_quietly() -> None:
    # A Celery worker stopped with SIGTERM ends this way: its sweeping thread may be mid-run.
    script = """
import asyncio, threading
from tarry.running import run_sync

ready = threading.Event()

async def forever():
    ready.set()
    await asyncio.sleep(60)

threading.Thread(target=lambda: run_sync(forever()), daemon=True).start()
assert ready.wait(30)
run_sync(asyncio.sleep(0))
print("done")
"""
    finished = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert finished.returncode == 0, finished.stderr
    assert finished.stdout.strip() == "done"
    assert "Cannot close a running event loop" not in finished.stderr
    assert "Exception ignored" not in finished.stderr
