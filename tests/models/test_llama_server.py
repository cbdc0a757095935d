"""End to end against a real OpenAI-compatible server: llama-cpp-python's, with Gemma 3 270M.

The server is started once per session (see ``llama_server.py``); CI installs it. A 270M base
model is not smart, so these tests assert on the protocol: the server accepts every request
tarry sends, the transcript has the right shape, each tool ran once. Never on the model's words.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tarry import Chat, Message, Task, Tool, tool
from tarry.errors import ContextLengthError
from tarry.messages import MessageDone, ModelRequest, StreamEvent, TextDelta, ToolCallEvent
from tarry.models import OpenAICompatible
from tarry.store import Store

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = {"max_tokens": 24, "temperature": 0, "seed": 7}


class Recording(OpenAICompatible):
    """The adapter, keeping each request body it sent (to check what reached the server)."""

    def __init__(self, base_url: str) -> None:
        super().__init__("gemma-3-270m", base_url=base_url, provider="llama", required_tool_choice=False)
        self.sent: list[dict[str, Any]] = []

    def request_body(self, request: ModelRequest) -> dict[str, Any]:
        body = super().request_body(request)
        self.sent.append(body)
        return body


class GetWeather(Tool):
    """Tells the weather in a city."""

    def __init__(self, requires_approval: bool = False) -> None:
        self.requires_approval = requires_approval
        self.runs: list[str] = []

    def execute(self, city: str) -> str:
        self.runs.append(city)
        return f"It is sunny in {city}."


class AskUnit(Tool):
    """Tells the temperature in a city, in the unit the person picks."""

    def execute(self, city: str) -> Task:
        return self.ask(f"Which unit for {city}?", unit=str)

    def resume(self, task: Task, city: str) -> str:
        assert task.answer is not None
        return f"21 degrees {task.answer['unit']} in {city}."


class Report(Tool):
    """Writes a report about a city in the background."""

    def __init__(self) -> None:
        self.ready = False
        self.checks = 0

    def execute(self, city: str) -> Task:
        return Task(status_message="writing")

    def resume(self, task: Task, city: str) -> str | Task:
        self.checks += 1
        return f"The report on {city} is done." if self.ready else task


def shape(chat: Chat) -> list[tuple[str, tuple[str, ...]]]:
    """Each message's role and the names of the tools it called."""
    return [(message.role, tuple(call.name for call in message.tool_calls)) for message in chat.messages]


def assert_forced_then(model: Recording, tool_name: str, *later: str) -> None:
    choices = [body.get("tool_choice") for body in model.sent]
    assert choices == [{"type": "function", "function": {"name": tool_name}}, *later]


async def finish_with_a_reply(chat: Chat) -> Message:
    """Carry the chat on with ``tool_choice="none"``, so this small model must answer in words.

    Choosing freely (``"auto"``), Gemma 3 270M calls a tool again every time, and
    llama-cpp-python's template shows it no tool results: a chat would never end.
    """
    chat.tool_choice = "none"
    reply = await chat.complete()
    assert reply is not None
    return reply


async def test_a_plain_reply_with_usage(llama_url: str) -> None:
    model = Recording(llama_url)
    chat = Chat(model=model, settings=SETTINGS)

    reply = await chat.ask("Say hello.")

    assert [message.role for message in chat.messages] == ["user", "assistant"]
    assert reply is chat.messages[1]
    assert reply.tool_calls == ()
    assert isinstance(reply.content, str)
    assert reply.usage is not None
    assert reply.usage.input_tokens > 0
    assert 0 < reply.usage.output_tokens <= SETTINGS["max_tokens"]


async def test_a_call_forced_by_name_then_auto_which_the_server_accepts(llama_url: str) -> None:
    model = Recording(llama_url)
    weather = GetWeather(requires_approval=True)
    chat = Chat(model=model, tools=[weather], tool_choice="get_weather", settings=SETTINGS)

    parked = await chat.ask("What is the weather in Paris?")
    (approval,) = await chat.pending_questions()
    assert await chat.approve(approval)
    reply = await chat.complete()  # the result goes back with tool_choice "auto"

    assert_forced_then(model, "get_weather", "auto")
    assert shape(chat)[:3] == [("user", ()), ("assistant", ("get_weather",)), ("tool", ())]
    call = parked.tool_calls[0]
    assert set(call.arguments) == {"city"}
    assert chat.messages[2].tool_call_id == call.id
    assert weather.runs == [call.arguments["city"]]
    # Choosing freely, the model either answers or calls again (which waits for a new approval).
    assert reply is chat.messages[3]
    assert reply.role == "assistant"
    assert chat.waiting == bool(reply.tool_calls)
    # The request the issue saw refused: an assistant message that only calls a tool, then its result.
    replayed = model.sent[1]["messages"]
    assert replayed[1]["role"] == "assistant"
    assert replayed[1]["content"] == ""
    wire_id = replayed[1]["tool_calls"][0]["id"]
    assert replayed[2] == {"role": "tool", "tool_call_id": wire_id, "content": chat.messages[2].content}


async def test_required_with_one_tool_names_it_and_the_server_accepts(llama_url: str) -> None:
    model = Recording(llama_url)
    chat = Chat(model=model, tools=[GetWeather(requires_approval=True)], tool_choice="required", settings=SETTINGS)

    await chat.ask("What is the weather in Rome?")

    assert chat.messages[1].tool_calls[0].name == "get_weather"
    assert_forced_then(model, "get_weather")


async def test_an_approval_is_carried_to_the_final_reply(llama_url: str) -> None:
    model = Recording(llama_url)
    weather = GetWeather(requires_approval=True)
    chat = Chat(model=model, tools=[weather], tool_choice="get_weather", settings=SETTINGS)

    parked = await chat.ask("What is the weather in Paris?")

    assert chat.waiting
    assert parked is chat.messages[1]
    (approval,) = await chat.pending_questions()
    assert approval.kind == "approval"
    assert weather.runs == []
    assert await chat.approve(approval)

    answer = await finish_with_a_reply(chat)

    assert not chat.waiting
    assert shape(chat) == [("user", ()), ("assistant", ("get_weather",)), ("tool", ()), ("assistant", ())]
    assert chat.messages[2].content.startswith("It is sunny in")
    assert weather.runs == [parked.tool_calls[0].arguments["city"]]
    assert answer is chat.messages[-1]
    assert_forced_then(model, "get_weather", "none")


async def test_a_question_the_tool_asks_is_answered_and_the_chat_finishes(llama_url: str) -> None:
    model = Recording(llama_url)
    chat = Chat(model=model, tools=[AskUnit()], tool_choice="ask_unit", settings=SETTINGS)

    await chat.ask("How warm is it in Oslo?")

    (question,) = await chat.pending_questions()
    assert question.kind == "form"
    assert [field.name for field in question.fields] == ["unit"]
    assert await chat.answer(question, "celsius")
    answer = await finish_with_a_reply(chat)

    assert not chat.waiting
    assert shape(chat) == [("user", ()), ("assistant", ("ask_unit",)), ("tool", ()), ("assistant", ())]
    assert chat.messages[2].content.startswith("21 degrees celsius in ")
    assert answer is chat.messages[-1]


async def test_a_task_parks_until_its_work_is_done_then_the_chat_finishes(llama_url: str) -> None:
    model = Recording(llama_url)
    report = Report()
    chat = Chat(model=model, tools=[report], tool_choice="report", settings=SETTINGS)

    await chat.ask("Write a report on Lima.")
    assert chat.waiting
    (task,) = await chat.pending_tasks()
    assert task.status_message == "writing"

    await chat.complete()
    assert chat.waiting
    assert len(model.sent) == 1  # still working: the model is not asked again

    report.ready = True
    answer = await finish_with_a_reply(chat)

    assert not chat.waiting
    assert shape(chat) == [("user", ()), ("assistant", ("report",)), ("tool", ()), ("assistant", ())]
    assert chat.messages[2].content.startswith("The report on ")
    assert report.checks == 2
    assert answer is chat.messages[-1]


async def test_streaming_gives_deltas_and_call_events_and_the_same_transcript(llama_url: str) -> None:
    async def run(stream: bool) -> tuple[Chat, Recording, list[StreamEvent]]:
        model = Recording(llama_url)
        chat = Chat(
            model=model, tools=[GetWeather(requires_approval=True)], tool_choice="get_weather", settings=SETTINGS
        )
        events: list[StreamEvent] = []
        if stream:
            events += [event async for event in chat.stream("What is the weather in Paris?")]
        else:
            await chat.ask("What is the weather in Paris?")
        (approval,) = await chat.pending_questions()
        await chat.approve(approval)
        chat.tool_choice = "none"
        if stream:
            events += [event async for event in chat.stream()]
        else:
            await chat.complete()
        return chat, model, events

    streamed, streamed_model, events = await run(stream=True)
    plain, _, _ = await run(stream=False)

    (call_event,) = [event for event in events if isinstance(event, ToolCallEvent)]
    assert call_event.call == streamed.messages[1].tool_calls[0]
    done = [event.message for event in events if isinstance(event, MessageDone)]
    assert done == [streamed.messages[1], streamed.messages[3]]
    deltas = "".join(event.text for event in events if isinstance(event, TextDelta))
    assert deltas == streamed.messages[3].content
    assert len(streamed_model.sent) == 2

    def comparable(message: Message) -> tuple[Any, ...]:
        return (message.role, message.content, tuple((c.name, c.arguments) for c in message.tool_calls))

    assert [comparable(m) for m in streamed.messages] == [comparable(m) for m in plain.messages]


async def test_a_context_longer_than_the_server_reads_is_a_context_length_error(llama_url: str) -> None:
    chat = Chat(model=Recording(llama_url), settings=SETTINGS)

    with pytest.raises(ContextLengthError) as raised:
        await chat.ask("tell me " * 3000)

    assert raised.value.status == 400
    assert raised.value.provider == "llama"
    assert [message.role for message in chat.messages] == ["user"]


@tool(requires_approval=True)
def get_weather(city: str) -> str:
    """Tells the weather in a city."""
    with Path(os.environ["TARRY_TEST_RUNS"]).open("a") as runs:
        runs.write(f"{city}\n")
    return f"It is sunny in {city}."


def run_step(*args: str, runs: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TARRY_TEST_RUNS": str(runs)}
    done = subprocess.run(
        [sys.executable, "-m", "tests.models.test_llama_server", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


async def test_an_approval_parked_in_one_process_is_finished_in_another(llama_url: str, tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'chats.db'}"
    runs = tmp_path / "runs"
    async with Store(database) as store:
        await store.setup()

    parked = run_step("park", database, llama_url, runs=runs)
    assert parked["waiting"] is True
    async with Store(database) as store:
        (approval,) = await store.pending_questions()
        assert approval.tool_call is not None
        assert approval.tool_call.name == "get_weather"
        assert await store.approve(approval.id)
    finished = run_step("finish", database, llama_url, parked["chat_id"], runs=runs)

    assert finished["waiting"] is False
    assert finished["shape"][0] == ["user", []]
    assert finished["shape"][1] == ["assistant", ["get_weather"]]
    assert finished["shape"][2] == ["tool", []]
    assert finished["shape"][-1] == ["assistant", []]
    assert len(runs.read_text().splitlines()) == 1


async def _step(command: str, database: str, url: str, chat_id: str = "") -> None:
    model = OpenAICompatible("gemma-3-270m", base_url=url, provider="llama")
    async with Store(database) as store:
        if command == "park":
            chat = await store.create_chat(
                model=model, tools=[get_weather], tool_choice="get_weather", settings=SETTINGS
            )
            await chat.ask("What is the weather in Paris?")
        else:
            chat = await store.load_chat(chat_id, model=model, tools=[get_weather])
            chat.tool_choice = "none"  # as in finish_with_a_reply
            await chat.complete()
        print(json.dumps({"chat_id": chat.id, "waiting": chat.waiting, "shape": shape(chat)}))


if __name__ == "__main__":
    import asyncio

    asyncio.run(_step(*sys.argv[1:]))
