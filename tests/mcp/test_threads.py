"""One MCPServer shared by threads, each with its own event loop (Celery's --pool threads, sync verbs)."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path

from mcp_helpers import booking_command

from tarry import Chat
from tarry.mcp import MCPServer
from tarry.testing import ScriptedModel


def booking_processes() -> set[int]:
    """The pids of this process's children that run the booking server."""
    found: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            command = (entry / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue  # it ended meanwhile
        if parent == os.getpid() and b"booking.py" in command:
            found.add(int(entry.name))
    return found


def wait_until(condition: object, within: float = 30.0) -> None:
    end = time.monotonic() + within
    while not callable(condition) or not condition():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.05)


def test_threads_get_a_connection_each_their_own_questions_and_close_from_another_thread() -> None:
    server = MCPServer(command=booking_command(), protocol="legacy")  # questions are pushed while calls run
    both_asked = threading.Barrier(2, timeout=60)
    closed = threading.Event()
    results: dict[int, str] = {}
    errors: list[BaseException] = []

    async def book(size: int) -> None:
        model = ScriptedModel([[{"name": "book", "arguments": {"restaurant": f"Table {size}"}}], "done"])
        chat = Chat(model=model, tools=[server])
        running = asyncio.create_task(chat.ask("book"))
        for step in range(2):
            while not (questions := await chat.pending_questions()):
                assert not running.done(), running
                await asyncio.sleep(0.05)
            (question,) = questions
            if step == 0:
                # Both calls now wait inside the server for a pushed question, on one MCPServer.
                await asyncio.to_thread(both_asked.wait)
                assert await chat.answer(question, size)
            else:
                assert await chat.answer(question, time="20:00", terrace=False)
        await asyncio.wait_for(running, 60)
        results[size] = next(message.content for message in chat.messages if message.role == "tool")
        await asyncio.to_thread(closed.wait, 60)  # keep this loop running until the main thread closed the server

    def thread(size: int) -> None:
        try:
            with asyncio.Runner() as runner:
                runner.run(book(size))
        except BaseException as error:  # reported by the test below
            errors.append(error)

    before = booking_processes()
    threads = [threading.Thread(target=thread, args=(size,)) for size in (2, 6)]
    for item in threads:
        item.start()
    wait_until(lambda: len(results) == 2 or errors)
    assert not errors, errors
    assert results == {2: "Booked Table 2 for 2 at 20:00", 6: "Booked Table 6 for 6 at 20:00"}
    servers = booking_processes() - before
    assert len(servers) == 2, "each thread's loop has its own connection (its own stdio server)"

    asyncio.run(server.close())  # from a third thread and loop
    wait_until(lambda: not (booking_processes() & servers))  # both stdio servers stopped: none leaks
    closed.set()
    for item in threads:
        item.join(30)
    assert not errors, errors
