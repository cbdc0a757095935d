"""OpenTelemetry spans for tool calls, pauses, decisions and store transactions, read from an in-memory exporter."""

from __future__ import annotations

import asyncio
import functools
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from tarry import Agent, Chat, Field, Task, Tool
from tarry.jobs.checks import claim_batch, run_batch
from tarry.store import Store
from tarry.store.due import pick_due
from tarry.testing import ScriptedModel
from tarry.tracing import function_name
from tests.spans import named, spans_fixture  # noqa: F401 (the spans fixture)

SECRET = "hunter2-not-in-a-span"


class Refund(Tool):
    """Refunds an order once a person approves."""

    requires_approval = True

    def execute(self, order: str) -> str:
        return f"Refunded {order}."


class Login(Tool):
    """Logs in once a person types the password."""

    def execute(self, user: str) -> Task:
        return self.ask(f"Password for {user}?", password=Field(description="The password"))

    def resume(self, task: Task, user: str) -> str:
        return f"Logged in as {user}."


class Broken(Tool):
    """Always raises."""

    def execute(self) -> str:
        raise RuntimeError("out of order")


def attributes(span: object) -> dict[str, object]:
    return dict(span.attributes or {})  # type: ignore[attr-defined]


async def test_a_stored_chat_traces_its_pause_decision_tool_call_and_transactions(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    async with Store(f"sqlite:///{tmp_path / 'chats.db'}") as store:
        await store.setup()
        model = ScriptedModel([[{"name": "refund", "arguments": {"order": "A17"}}], "Refunded."])
        chat = await store.create_chat(model, [Refund()])
        await chat.ask("Refund A17")
        [approval] = await store.pending_questions(chat.id)
        assert approval.tool_call is not None
        call_id = approval.tool_call.id
        ids = {"tarry.chat_id": chat.id, "tarry.call_id": call_id}

        [pause] = named(spans, "pause refund")
        assert attributes(pause) == {**ids, "gen_ai.tool.name": "refund", "tarry.pause.reason": "approval"}

        assert await store.approve(approval.id)
        [decision] = named(spans, "decision accept")
        assert attributes(decision) == {
            **ids,
            "tarry.question_id": approval.id,
            "tarry.decision": "accept",
            "gen_ai.tool.name": "refund",
        }

        await chat.complete()
        [run] = named(spans, "execute_tool refund")
        assert run.kind is SpanKind.INTERNAL and run.status.status_code is StatusCode.UNSET
        assert attributes(run) == {
            **ids,
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "refund",
            "gen_ai.tool.call.id": call_id,
        }
        writes = named(spans, "store.write")
        assert writes and all(span.kind is SpanKind.CLIENT for span in writes)
        assert {attributes(span)["db.system.name"] for span in writes} == {"sqlite"}
        assert any("decide_question" in str(attributes(span)["tarry.transaction"]) for span in writes)
        assert named(spans, "store.read")
        assert [span.name for span in named(spans, "chat ")] == ["chat scripted", "chat scripted"]


async def test_an_answer_is_traced_by_its_ids_never_its_value(spans: InMemorySpanExporter) -> None:
    chat = Chat(model=ScriptedModel([[{"name": "login", "arguments": {"user": "ada"}}], "In."]), tools=[Login()])
    await chat.ask("Log in")
    [question] = await chat.pending_questions()
    [pause] = named(spans, "pause login")
    assert attributes(pause)["tarry.pause.reason"] == "question"
    assert attributes(pause)["tarry.questions"] == 1
    await chat.answer(question, SECRET)
    [decision] = named(spans, "decision accept")
    assert attributes(decision)["tarry.question_id"] == question.id
    await chat.complete()
    assert chat.messages[-2].content == "Logged in as ada."
    for span in spans.get_finished_spans():
        assert SECRET not in json.dumps(attributes(span), default=str)
        assert all(SECRET not in str(event.attributes) for event in span.events)


async def test_a_model_request_span_carries_the_genai_attributes_and_a_raising_tool_ends_its_span(
    spans: InMemorySpanExporter,
) -> None:
    model = ScriptedModel([[{"name": "broken", "arguments": {}}], "Sorry."])
    chat = Chat(model=model, tools=[Broken()], settings={"temperature": 0.2, "max_tokens": 50})
    await chat.ask("Go")
    [run] = named(spans, "execute_tool broken")
    # The chat turns the exception into an error result for the model, so the span itself ends cleanly.
    assert run.status.status_code is StatusCode.UNSET
    first, _ = named(spans, "chat ")
    assert first.kind is SpanKind.CLIENT
    assert attributes(first) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "scripted",
        "gen_ai.request.model": "scripted",
        "gen_ai.conversation.id": chat.id,
        "gen_ai.request.temperature": 0.2,
        "gen_ai.request.max_tokens": 50,
    }


async def test_a_failing_model_request_marks_its_span_as_failed(spans: InMemorySpanExporter) -> None:
    chat = Chat(model=ScriptedModel([42]))  # type: ignore[list-item]
    with pytest.raises(Exception, match="must be text or a list of tool calls"):
        await chat.ask("Go")
    [failed] = named(spans, "chat scripted")
    assert failed.status.status_code is StatusCode.ERROR
    assert [event.name for event in failed.events] == ["exception"]


def test_the_examples_of_docs_tracing_md_run_in_a_fresh_process() -> None:
    # docs/tracing.md runs here, in a fresh process: it sets the global tracer provider, which a process sets once.
    page = (Path(__file__).parents[1] / "docs" / "tracing.md").read_text(encoding="utf-8")
    program = "\n".join(re.findall(r"```python\n(.*?)```", page, re.S))
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]


def test_tarry_works_without_opentelemetry() -> None:
    program = """
import sys
sys.modules["opentelemetry"] = None  # as if tarry[otel] were not installed: importing it fails
from tarry import Chat
from tarry.testing import ScriptedModel
from tarry.tracing import function_name
from tarry.tracing import tracer
assert Chat(model=ScriptedModel(["Hi."])).ask_sync("Hello").content == "Hi."
assert tracer() is None
"""
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_transaction_is_named_by_its_function_never_by_its_arguments() -> None:
    def renew(connection: object, secret: str) -> None:
        """A transaction the store runs as a partial."""

    assert function_name(functools.partial(renew, secret=SECRET)) == renew.__qualname__


class Poll(Tool):
    """A task that works on for its first check and ends at its second."""

    def execute(self) -> Task:
        return Task(poll_interval=0.01, data={"checks": 0})

    def resume(self, task: Task) -> str | Task:
        return "ready" if task.data["checks"] else Task(poll_interval=60, data={"checks": 1})


async def test_a_batched_check_is_traced_as_a_full_steps_resume_is(tmp_path: Path, spans: InMemorySpanExporter) -> None:
    agent = Agent("poller", model=lambda: ScriptedModel([[{"name": "poll", "arguments": {}}]]), tools=[Poll()])
    async with Store(f"sqlite:///{tmp_path / 'chats.db'}") as store:
        await store.setup()
        chat = await store.create_chat(agent=agent)
        await chat.ask("Poll")
        [call] = [call for message in chat.messages for call in message.tool_calls]
        ids = {"tarry.chat_id": chat.id, "tarry.call_id": call.id}
        spans.clear()
        deadline = time.monotonic() + 10
        while not (picked := await pick_due(store, ["poller"], [], 1)):  # until its first check falls due
            assert time.monotonic() < deadline, "the task's check never fell due"
            await asyncio.sleep(0.01)
        batch = await claim_batch(store, {"poller": agent}, picked)
        assert len(batch.checks) == 1
        await run_batch(store, {"poller": agent}, batch, asyncio.Semaphore(1), 1.0)
        [run] = named(spans, "execute_tool poll")
        assert run.kind is SpanKind.INTERNAL and run.status.status_code is StatusCode.UNSET
        assert attributes(run) == {
            **ids,
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "poll",
            "gen_ai.tool.call.id": call.id,
        }
        [pause] = named(spans, "pause poll")
        assert attributes(pause) == {
            **ids,
            "gen_ai.tool.name": "poll",
            "tarry.pause.reason": "task",
            "tarry.task.status": "working",
            "tarry.questions": 0,
        }
