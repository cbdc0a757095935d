"""One adapter object shared by threads that each run their own event loop (Celery's ``--pool threads``).

An SDK client's connections belong to the loop that opened them, so the adapter keeps one client
per event loop; a client the caller passed in is refused on a second loop with a clear error.
These run against the real llama.cpp server, so real connections are pooled and reused.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import openai
import pytest

from tarry import Chat
from tarry.errors import TarryError
from tarry.models import OpenAICompatible

SETTINGS = {"max_tokens": 4, "temperature": 0}


class Turns:
    """Lets threads take numbered steps strictly one after another."""

    def __init__(self, timeout: float = 240) -> None:
        self.step = 0
        self.timeout = timeout
        self.condition = threading.Condition()

    def wait_for(self, step: int) -> None:
        with self.condition:
            assert self.condition.wait_for(lambda: self.step >= step, self.timeout), f"step {step} never came"

    def done(self) -> None:
        with self.condition:
            self.step += 1
            self.condition.notify_all()


def in_threads(count: int, work: Callable[[int], Any], timeout: float = 240) -> list[Any]:
    """Run ``work(number)`` in ``count`` threads; return each one's result or exception."""
    results: list[Any] = [None] * count

    def target(number: int) -> None:
        try:
            results[number] = work(number)
        except Exception as error:
            results[number] = error

    threads = [threading.Thread(target=target, args=(number,)) for number in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
        assert not thread.is_alive(), "a thread hung"
    return results


def test_one_adapter_serves_threads_that_each_run_their_own_event_loop(llama_url: str) -> None:
    model = OpenAICompatible("gemma-3-270m", base_url=llama_url, provider="llama")
    turns = Turns()

    def work(number: int) -> list[Any]:
        clients = []
        with asyncio.Runner() as runner:
            # The threads take turns (A, B, A, B, ...), so each request finds the other loop's
            # connection idle, as it would be in a client the two shared.
            for turn in range(3):
                turns.wait_for(2 * turn + number)
                try:
                    reply = runner.run(Chat(model=model, settings=SETTINGS).ask(f"Count to {turn}."))
                    assert reply.role == "assistant"
                    clients.append(runner.run(_client(model)))
                finally:
                    turns.done()
        return clients

    first, second = in_threads(2, work)

    assert not isinstance(first, Exception), first
    assert not isinstance(second, Exception), second
    assert len({id(client) for client in first}) == 1
    assert len({id(client) for client in second}) == 1
    assert first[0] is not second[0]


def test_a_client_passed_in_is_refused_on_a_second_event_loop(llama_url: str) -> None:
    given = openai.AsyncOpenAI(base_url=llama_url, api_key="none")
    model = OpenAICompatible("gemma-3-270m", base_url=llama_url, provider="llama", client=given)
    turns = Turns()

    def work(number: int) -> Any:
        with asyncio.Runner() as runner:
            turns.wait_for(number)
            try:
                return runner.run(Chat(model=model, settings=SETTINGS).ask("Hi"))
            finally:
                turns.done()
                turns.wait_for(2)  # thread 0's loop stays open while thread 1 tries

    first, second = in_threads(2, work)

    assert not isinstance(first, Exception), first
    assert isinstance(second, TarryError)
    assert "client=" in str(second)
    assert "another event loop" in str(second)


async def _client(model: OpenAICompatible) -> Any:
    return model.client


def test_the_client_is_made_inside_an_event_loop_only() -> None:
    model = OpenAICompatible("gemma-3-270m", base_url="http://127.0.0.1:9/v1")

    with pytest.raises(TarryError, match="inside a running event loop"):
        _ = model.client
