"""Tasks in a chat: pausing a call, resuming it once per complete(), results of finished tasks, cancel."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from tarry import Chat, Message, Task, TaskStatus, Tool, ToolCall
from tarry.testing import ScriptedModel


class Render(Tool):
    """Renders a video; it is ready after a number of checks."""

    def __init__(self, checks_needed: int = 2) -> None:
        self.checks_needed = checks_needed
        self.resumes: list[dict[str, Any]] = []

    def execute(self, name: str) -> Task:
        return Task(status_message="queued", poll_interval=5, data={"name": name, "checks": 0})

    def resume(self, task: Task, name: str) -> str | Task:
        self.resumes.append(dict(task.data))
        checks = task.data["checks"] + 1
        if checks >= self.checks_needed:
            return f"{name}.mp4 is ready"
        return Task(status_message=f"check {checks}", data={"name": name, "checks": checks})


def render(name: str = "intro") -> list[dict[str, Any]]:
    return [{"name": "render", "arguments": {"name": name}}]


def results(chat: Chat) -> list[Any]:
    return [message.result() for message in chat.messages if message.role == "tool"]


async def test_a_task_pauses_the_call_and_each_complete_resumes_it_once() -> None:
    tool = Render(checks_needed=2)
    model = ScriptedModel([render(), "Your video is ready."])
    chat = Chat(model=model, tools=[tool])
    parked = await chat.ask("Render the intro")
    assert parked is chat.messages[1]
    assert chat.waiting
    [task] = await chat.pending_tasks()
    assert task.status == "working"
    assert task.status_message == "queued"
    assert task.poll_interval == 5.0
    assert task.data == {"name": "intro", "checks": 0}
    assert task.tool_call == chat.messages[1].tool_calls[0]
    assert tool.resumes == []
    assert await chat.pending_questions() == []

    await chat.complete()
    assert tool.resumes == [{"name": "intro", "checks": 0}]
    [task] = await chat.pending_tasks()
    assert task.status_message == "check 1"
    assert len(model.requests) == 1

    reply = await chat.complete()
    assert tool.resumes == [{"name": "intro", "checks": 0}, {"name": "intro", "checks": 1}]
    assert reply == Message("assistant", "Your video is ready.")
    assert results(chat) == ["intro.mp4 is ready"]
    assert await chat.pending_tasks() == []
    assert chat.waiting is False
    # Done calls are never resumed again.
    await chat.complete()
    assert len(tool.resumes) == 2


async def test_several_paused_tasks_are_each_resumed_once_per_complete() -> None:
    tool = Render(checks_needed=3)
    turn = render("a") + render("b")
    chat = Chat(model=ScriptedModel([turn, "both"]), tools=[tool])
    await chat.ask("go")
    assert len(await chat.pending_tasks()) == 2
    await chat.complete()
    assert sorted(resume["name"] for resume in tool.resumes) == ["a", "b"]
    await chat.complete()
    assert len(tool.resumes) == 4
    reply = await chat.complete()
    assert reply is not None
    assert reply.content == "both"


@pytest.mark.parametrize(
    ("task", "expected"),
    [
        (Task("completed", status_message="42 rows"), "42 rows"),
        (Task(TaskStatus.COMPLETED, data={"rows": 42}), {"rows": 42}),
        (Task("failed", status_message="disk full"), {"error": "The job call failed: disk full"}),
        (Task("failed"), {"error": "The job call failed."}),
        (
            Task("cancelled", status_message="stopped by admin"),
            {"error": "The job call was cancelled: stopped by admin"},
        ),
    ],
)
@pytest.mark.parametrize("where", ["execute", "resume"])
async def test_finished_tasks_end_the_call(task: Task, expected: Any, where: str) -> None:
    class Job(Tool):
        """Runs a job."""

        def execute(self) -> Task:
            return task if where == "execute" else Task()

        def resume(self, paused: Task) -> Task:
            return task

    chat = Chat(model=ScriptedModel([[{"name": "job", "arguments": {}}], "ok"]), tools=[Job()])
    await chat.ask("go")
    if where == "resume":
        assert chat.waiting
        await chat.complete()
    assert results(chat) == [expected]
    assert chat.waiting is False


async def test_an_input_required_task_without_a_question_is_resumed_like_a_working_one() -> None:
    resumes = 0

    class SubAgent(Tool):
        """Hands a job to a sub-agent."""

        def execute(self, job: str) -> Task:
            return Task("input_required", data={"run": 1})

        def resume(self, task: Task, job: str) -> str | Task:
            nonlocal resumes
            resumes += 1
            return "answered" if resumes == 2 else task

    chat = Chat(model=ScriptedModel([[{"name": "sub_agent", "arguments": {"job": "x"}}], "ok"]), tools=[SubAgent()])
    await chat.ask("go")
    [task] = await chat.pending_tasks()
    assert task.input_required()
    await chat.complete()
    assert resumes == 1
    await chat.complete()
    assert resumes == 2
    assert results(chat) == ["answered"]


class Remote(Task):
    """A task whose work lives elsewhere; refresh and cancel reach it asynchronously."""

    log: ClassVar[list[str]] = []

    async def refresh(self) -> Task:  # type: ignore[override]
        self.log.append("refresh")
        polls = self.data.get("polls", 0) + 1
        if polls >= 2:
            return Remote("completed", status_message="remote finished")
        return Remote(data={"polls": polls})

    async def cancel(self) -> Task:  # type: ignore[override]
        self.log.append("cancel")
        self.status = "cancelled"
        return self


class LocalCancel(Task):
    """A task with a plain, synchronous cancel()."""

    log: ClassVar[list[str]] = []

    def cancel(self) -> Task:
        self.log.append("cancel")
        return self


async def test_the_default_resume_awaits_an_async_refresh() -> None:
    Remote.log = []

    class Fetch(Tool):
        """Starts remote work; the default resume checks on it."""

        def execute(self) -> Task:
            return Remote()

    chat = Chat(model=ScriptedModel([[{"name": "fetch", "arguments": {}}], "ok"]), tools=[Fetch()])
    await chat.ask("go")
    assert Remote.log == []
    await chat.complete()
    assert Remote.log == ["refresh"]
    [task] = await chat.pending_tasks()
    assert isinstance(task, Remote)
    assert task.data == {"polls": 1}
    await chat.complete()
    assert Remote.log == ["refresh", "refresh"]
    assert results(chat) == ["remote finished"]


@pytest.mark.parametrize("task_class", [Remote, LocalCancel, Task])
async def test_cancel_calls_each_paused_tasks_cancel(task_class: type[Task]) -> None:
    Remote.log = []
    LocalCancel.log = []

    class Start(Tool):
        """Starts work."""

        def execute(self, n: int) -> Task:
            return task_class(data={"n": n})

    turn = [{"name": "start", "arguments": {"n": 1}}, {"name": "start", "arguments": {"n": 2}}]
    model = ScriptedModel([turn, "ok", "new topic"])
    chat = Chat(model=model, tools=[Start()])
    await chat.ask("go")
    assert len(await chat.pending_tasks()) == 2
    await chat.cancel()
    if task_class is not Task:
        assert task_class.log == ["cancel", "cancel"]  # type: ignore[attr-defined]
    assert await chat.pending_tasks() == []
    assert chat.waiting is False
    assert results(chat) == [{"error": "The start call was cancelled."}] * 2
    # The transcript is valid for any provider: each call has exactly one result, so the chat goes on.
    reply = await chat.ask("something else")
    assert reply is not None
    assert reply.content == "ok"
    assert len(model.requests) == 2


async def test_cancel_covers_tasks_questions_and_approvals_together() -> None:
    LocalCancel.log = []

    class Start(Tool):
        """Starts work."""

        def execute(self) -> Task:
            return LocalCancel()

    class Ask(Tool):
        """Asks."""

        def execute(self) -> Task:
            return self.ask("Sure?", sure=bool)

    class Gate(Tool):
        """Gated."""

        requires_approval = True

        def execute(self) -> str:
            return "ran"

    turn = [{"name": name, "arguments": {}} for name in ("start", "ask", "gate")]
    chat = Chat(model=ScriptedModel([turn, "ok"]), tools=[Start(), Ask(), Gate()])
    await chat.ask("go")
    questions = await chat.pending_questions()
    assert [question.kind for question in questions] == ["form", "approval"]
    await chat.cancel()
    assert LocalCancel.log == ["cancel"]
    assert await chat.pending_questions() == []
    questions = [await chat.question(question) for question in questions]
    assert all(question.decision == "cancel" for question in questions)
    assert sorted(result["error"] for result in results(chat)) == [
        "The ask call was cancelled.",
        "The gate call was cancelled.",
        "The start call was cancelled.",
    ]
    # Deciding a cancelled question changes nothing.
    assert await chat.approve(questions[1]) is False


async def test_a_task_that_fails_to_cancel_still_closes_the_call() -> None:
    class Stubborn(Task):
        def cancel(self) -> Task:
            raise RuntimeError("cannot stop")

    class Start(Tool):
        """Starts work."""

        def execute(self) -> Task:
            return Stubborn()

    chat = Chat(model=ScriptedModel([[{"name": "start", "arguments": {}}], "ok"]), tools=[Start()])
    await chat.ask("go")
    await chat.cancel()
    assert results(chat) == [{"error": "The start call was cancelled."}]


async def test_cancel_on_a_chat_with_nothing_waiting_does_nothing() -> None:
    chat = Chat(model=ScriptedModel(["hi"]))
    await chat.ask("hello")
    before = list(chat.messages)
    await chat.cancel()
    assert chat.messages == before


async def test_the_paused_task_knows_its_call() -> None:
    tool = Render()
    chat = Chat(model=ScriptedModel([render(), "done"]), tools=[tool])
    await chat.ask("go")
    [task] = await chat.pending_tasks()
    assert isinstance(task.tool_call, ToolCall)
    assert task.tool_call.name == "render"
