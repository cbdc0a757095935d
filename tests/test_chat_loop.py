"""The loop: ask, complete, step, the transcript, and running the calls of a turn concurrently."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from tarry import Chat, Message, Tool, ToolCall, tool
from tarry.errors import TarryError
from tarry.testing import ScriptedModel


def calls(*items: tuple[str, dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"name": name, "arguments": arguments} for name, arguments in items]


class Counter(Tool):
    """Counts how often it runs."""

    def __init__(self) -> None:
        self.runs = 0

    def execute(self, label: str) -> str:
        self.runs += 1
        return f"ran {label}"


class Gated(Tool):
    """Needs approval."""

    requires_approval = True

    def execute(self, what: str) -> str:
        return f"gated {what}"


async def test_ask_without_tools_returns_the_reply_and_records_the_transcript() -> None:
    model = ScriptedModel(["Hello there"])
    chat = Chat(model=model, instructions="Be brief.")
    reply = await chat.ask("Hi")
    assert reply == Message("assistant", "Hello there")
    assert chat.messages == [Message("user", "Hi"), Message("assistant", "Hello there")]
    assert chat.waiting is False
    # Instructions are a chat attribute sent with each request, not a message.
    [request] = model.requests
    assert request.instructions == "Be brief."
    assert list(request.messages) == [Message("user", "Hi")]


async def test_the_transcript_shapes_of_a_tool_turn() -> None:
    counter = Counter()
    model = ScriptedModel([calls(("counter", {"label": "a"})), "Counted."])
    chat = Chat(model=model, tools=[counter])
    reply = await chat.ask("count")
    assert reply is not None
    assert reply.content == "Counted."
    user, assistant, result, final = chat.messages
    assert user == Message("user", "count")
    assert assistant.role == "assistant"
    assert assistant.content == ""
    [tool_call] = assistant.tool_calls
    assert isinstance(tool_call, ToolCall)
    assert (tool_call.name, dict(tool_call.arguments)) == ("counter", {"label": "a"})
    assert result == Message("tool", "ran a", tool_call_id=tool_call.id)
    assert final == reply
    # The model saw its call and the result on the second request.
    assert list(model.requests[1].messages) == [user, assistant, result]


async def test_every_call_gets_exactly_one_result() -> None:
    counter = Counter()
    turn = calls(("counter", {"label": "a"}), ("counter", {"label": "b"}), ("counter", {"label": "c"}))
    chat = Chat(model=ScriptedModel([turn, "ok"]), tools=[counter])
    await chat.ask("go")
    ids = [call.id for call in chat.messages[1].tool_calls]
    assert len(set(ids)) == 3
    results = [message.tool_call_id for message in chat.messages if message.role == "tool"]
    assert sorted(results) == sorted(ids)
    assert counter.runs == 3


async def test_complete_with_nothing_to_do_returns_the_last_reply_without_the_model() -> None:
    model = ScriptedModel(["one"])
    chat = Chat(model=model)
    assert await chat.complete() is None
    assert model.requests == []
    first = await chat.ask("hi")
    again = await chat.complete()
    assert again is first
    assert len(model.requests) == 1
    assert chat.messages == [Message("user", "hi"), Message("assistant", "one")]


async def test_a_call_with_a_result_is_never_run_again() -> None:
    counter = Counter()
    model = ScriptedModel([calls(("counter", {"label": "a"})), "done", calls(("counter", {"label": "b"})), "again"])
    chat = Chat(model=model, tools=[counter])
    await chat.ask("first")
    await chat.complete()
    await chat.complete()
    assert counter.runs == 1
    await chat.ask("second")
    await chat.complete()
    assert counter.runs == 2
    assert [m.content for m in chat.messages if m.role == "tool"] == ["ran a", "ran b"]


async def test_the_loop_goes_on_while_the_model_calls_tools() -> None:
    counter = Counter()
    model = ScriptedModel([calls(("counter", {"label": "1"})), calls(("counter", {"label": "2"})), "two rounds"])
    chat = Chat(model=model, tools=[counter])
    reply = await chat.ask("go")
    assert reply is not None
    assert reply.content == "two rounds"
    assert counter.runs == 2
    assert len(model.requests) == 3


async def test_step_does_one_round_at_a_time() -> None:
    counter = Counter()
    model = ScriptedModel(
        [calls(("gated", {"what": "x"})), calls(("counter", {"label": "after"})), "finished"],
    )
    chat = Chat(model=model, tools=[counter, Gated()])
    await chat.ask("go")
    assert chat.waiting
    # While the call waits, a step does nothing and asks the model nothing.
    assert await chat.step() is None
    assert len(model.requests) == 1
    [approval] = await chat.pending_questions()
    assert await chat.approve(approval)
    second = await chat.step()
    assert second is not None
    assert second.tool_calls[0].name == "counter"
    assert counter.runs == 0
    assert len(model.requests) == 2
    third = await chat.step()
    assert third == Message("assistant", "finished")
    assert counter.runs == 1
    assert await chat.step() is None
    assert len(model.requests) == 3


async def test_a_model_error_leaves_the_chat_usable() -> None:
    chat = Chat(model=ScriptedModel(["only"]))
    await chat.ask("one")
    with pytest.raises(TarryError, match="ran out of turns"):
        await chat.ask("two")
    assert chat.messages[-1] == Message("user", "two")
    assert chat.waiting is False


async def test_chat_without_a_model_says_so() -> None:
    chat = Chat()
    with pytest.raises(TarryError, match="no model"):
        await chat.ask("hi")


@pytest.mark.parametrize("text", ["", "   ", None, 3])
async def test_ask_needs_text(text: Any) -> None:
    model = ScriptedModel(["x"])
    chat = Chat(model=model)
    with pytest.raises(ValueError, match="ask"):
        await chat.ask(text)
    assert chat.messages == []


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "2"])
def test_max_concurrency_must_be_a_positive_int(value: Any) -> None:
    with pytest.raises(ValueError, match="max_concurrency"):
        Chat(model=ScriptedModel([]), max_concurrency=value)


def test_model_must_be_a_model() -> None:
    with pytest.raises(TypeError, match="model must be"):
        Chat(model=42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="provider:model"):
        Chat(model="no-colon")


def test_a_model_is_checked_on_each_object_unless_its_class_has_a_model_s_members() -> None:
    class Sometimes:
        name = "sometimes"

        def __init__(self, able: bool) -> None:
            if able:
                self.complete = ScriptedModel(["hi"]).complete

    assert Chat(model=Sometimes(True)).model is not None  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="model must be"):
        Chat(model=Sometimes(False))  # type: ignore[arg-type]


async def test_a_tool_that_also_lists_tools_is_a_source_of_tools() -> None:
    @tool
    def inner() -> str:
        """The listed tool."""
        return "from the source"

    class Lister(Tool):
        """A tool that is also a source of tools."""

        def execute(self) -> str:
            return "never run"

        async def list_tools(self) -> list[Tool]:
            return [inner]

    chat = Chat(model=ScriptedModel([]), tools=[Lister()])
    assert list(chat.tools) == [] and list(await chat.load_tools()) == ["inner"]


# Concurrency


async def test_calls_of_one_turn_run_concurrently() -> None:
    # Each call waits at a barrier until both calls are inside it: run one after the other, they never get there.
    barrier = asyncio.Barrier(2)

    @tool
    async def meet(who: str) -> str:
        """Waits for the other call."""
        await barrier.wait()
        return f"{who} met"

    chat = Chat(model=ScriptedModel([calls(("meet", {"who": "a"}), ("meet", {"who": "b"})), "met"]), tools=[meet])
    reply = await asyncio.wait_for(chat.ask("go"), timeout=10)
    assert reply is not None
    assert reply.content == "met"
    assert sorted(m.content for m in chat.messages if m.role == "tool") == ["a met", "b met"]


async def test_sync_tools_run_concurrently_in_threads() -> None:
    barrier = threading.Barrier(2, timeout=10)

    @tool
    def meet(who: str) -> str:
        """Waits for the other call in another thread."""
        barrier.wait()
        return f"{who} met"

    chat = Chat(model=ScriptedModel([calls(("meet", {"who": "a"}), ("meet", {"who": "b"})), "met"]), tools=[meet])
    await chat.ask("go")
    assert sorted(m.content for m in chat.messages if m.role == "tool") == ["a met", "b met"]


@pytest.mark.parametrize(("limit", "count"), [(1, 3), (2, 5), (3, 4)])
async def test_max_concurrency_bounds_the_calls_running_at_once(limit: int, count: int) -> None:
    active = 0
    peak = 0
    order: list[int] = []
    arrived = asyncio.Event()
    release = [asyncio.Event() for _ in range(count)]

    @tool
    async def work(n: int) -> str:
        """Holds its slot until the test releases it."""
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        order.append(n)
        arrived.set()
        await release[n].wait()
        active -= 1
        return str(n)

    async def arrivals(wanted: int) -> None:
        while len(order) < wanted:
            arrived.clear()
            await arrived.wait()

    turn = calls(*[("work", {"n": n}) for n in range(count)])
    chat = Chat(model=ScriptedModel([turn, "done"]), tools=[work], max_concurrency=limit)
    running = asyncio.create_task(chat.ask("go"))
    async with asyncio.timeout(10):
        # `limit` calls get inside at once (a tighter bound would hang here); each release lets one more in.
        for released in range(count):
            await arrivals(min(count, released + limit))
            assert active <= limit
            release[order[released]].set()
        await running
    assert peak == limit
    assert sorted(int(m.content) for m in chat.messages if m.role == "tool") == list(range(count))


async def test_without_a_bound_all_calls_of_the_turn_start_together() -> None:
    # The same probe as above with a generous limit: every call is inside at once.
    active = 0
    peak = 0
    everyone = asyncio.Event()

    @tool
    async def work(n: int) -> str:
        """Waits until all calls are running."""
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        if active == 4:
            everyone.set()
        await everyone.wait()
        return str(n)

    turn = calls(*[("work", {"n": n}) for n in range(4)])
    chat = Chat(model=ScriptedModel([turn, "done"]), tools=[work])
    await asyncio.wait_for(chat.ask("go"), timeout=10)
    assert peak == 4


async def test_calls_needing_no_approval_run_while_gated_ones_wait() -> None:
    counter = Counter()
    model = ScriptedModel([calls(("gated", {"what": "x"}), ("counter", {"label": "free"})), "done"])
    chat = Chat(model=model, tools=[counter, Gated()])
    parked = await chat.ask("go")
    assert parked is chat.messages[1]
    assert parked.tool_calls[0].name == "gated"
    assert counter.runs == 1
    assert chat.waiting is True
    results = [m for m in chat.messages if m.role == "tool"]
    assert [m.content for m in results] == ["ran free"]
    # The model is not asked again while a call of its turn waits.
    assert len(model.requests) == 1
    [approval] = await chat.pending_questions()
    assert approval.kind == "approval"
    assert approval.tool_call is not None
    assert approval.tool_call.name == "gated"
    await chat.approve(approval)
    reply = await chat.complete()
    assert reply == Message("assistant", "done")
    assert chat.waiting is False
    assert counter.runs == 1


async def test_complete_approves_the_questions_it_is_given_then_carries_on_in_memory() -> None:
    model = ScriptedModel([calls(("gated", {"what": "a"}), ("gated", {"what": "b"})), "both done"])
    chat = Chat(model=model, tools=[Gated()])
    await chat.ask("go")
    first, second = await chat.pending_questions()
    assert (await chat.complete(approve=[first.id])) is chat.last_reply and chat.waiting  # b still waits
    first, second = await chat.question(first), await chat.question(second)
    assert first.decision == "accept" and second.decision is None
    reply = await chat.complete(approve=[second], by="ann@example.com")
    assert reply == Message("assistant", "both done") and not chat.waiting
    second = await chat.question(second)
    assert second.decided_by is not None and second.decided_by.id == "ann@example.com"
    assert [message.content for message in chat.messages if message.role == "tool"] == ["gated a", "gated b"]
