"""``tarry demo``: one chat whose tool calls wait on an approval, a question and unfinished work.

The chat runs in memory with a :class:`~tarry.testing.ScriptedModel`, so it needs no
network and no keys. The model calls three tools in one turn:

- ``transfer_money`` needs a person's approval before it runs;
- ``book_table`` asks a person when to book, then books;
- ``render_video`` returns a :class:`~tarry.Task` that finishes on a later ``complete()``.

What happens is printed by a :class:`Narrator`, kept apart from the story so another
front end (or a story across processes) can reuse it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tarry.chat import Chat
from tarry.messages import Message, ToolCall
from tarry.questions import Field, Question
from tarry.tasks import Task
from tarry.testing import ScriptedModel
from tarry.tools import Tool

USER_TEXT = "Pay Bob 20 euros for the concert tickets, book us a table at Luigi's, and render the holiday video."


class TransferMoney(Tool):
    """Moves money to someone. A person approves every transfer."""

    requires_approval = True
    approval_ttl = 3600

    def execute(self, amount: int, to: str) -> str:
        return f"Sent {amount} EUR to {to}."


class BookTable(Tool):
    """Books a table at a restaurant; asks the person for the time and the size of the party."""

    def execute(self, restaurant: str) -> Task:
        return self.ask(
            f"When should I book {restaurant}?",
            time=Field(choices=["19:00", "20:00", "21:00"], title="Time"),
            party=Field("integer", minimum=1, maximum=12, default=2, title="People"),
        )

    def resume(self, task: Task, restaurant: str) -> str:
        answer = task.answer or {}
        return f"Booked {restaurant} at {answer['time']} for {answer['party']}."


class RenderVideo(Tool):
    """Renders a video in the background; each check moves it on by half."""

    def execute(self, name: str) -> Task:
        return Task(status_message="queued", poll_interval=1, data={"progress": 0})

    def resume(self, task: Task, name: str) -> str | Task:
        progress = int(task.data["progress"]) + 50
        if progress >= 100:
            return f"{name}.mp4 is ready."
        return Task(status_message=f"rendering, {progress}% done", poll_interval=1, data={"progress": progress})


def final_reply(messages: list[Message]) -> str:
    """The scripted model's last turn: sums up the tool results it was sent."""
    results = [message.content for message in messages if message.role == "tool"]
    return "All done: " + " ".join(results)


def build_chat() -> Chat:
    """The demo's chat: the scripted model and the three tools."""
    model = ScriptedModel(
        [
            [
                {"name": "transfer_money", "arguments": {"amount": 20, "to": "Bob"}},
                {"name": "book_table", "arguments": {"restaurant": "Luigi's"}},
                {"name": "render_video", "arguments": {"name": "holiday"}},
            ],
            final_reply,
        ],
        name="demo",
    )
    return Chat(
        model=model,
        tools=[TransferMoney(), BookTable(), RenderVideo()],
        instructions="You help with errands.",
    )


def describe_call(call: ToolCall | None) -> str:
    """``name(arg=value, ...)`` as the model sent it."""
    if call is None:
        return "(no call)"
    arguments = ", ".join(f"{name}={value!r}" for name, value in call.arguments.items())
    return f"{call.name}({arguments})"


def describe_field(field: Field) -> str:
    """One field of a question, as a person would read it."""
    parts: list[str] = [field.type]
    if field.choices is not None:
        parts = ["one of " + ", ".join(str(choice) for choice in field.choice_values)]
    if field.minimum is not None or field.maximum is not None:
        low = "" if field.minimum is None else f"{field.minimum:g}"
        high = "" if field.maximum is None else f"{field.maximum:g}"
        parts.append(f"{low}..{high}")
    if field.default is not None:
        parts.append(f"default {field.default}")
    if not field.required:
        parts.append("optional")
    return f"{field.name} ({', '.join(parts)})"


def describe_task(task: Task) -> str:
    """A paused task's call and how far it got."""
    name = task.tool_call.name if task.tool_call else "task"
    detail = f": {task.status_message}" if task.status_message else ""
    return f"{name} is {task.status}{detail}"


class Narrator:
    """Prints the steps of a chat readably; ``out`` receives one line at a time."""

    def __init__(self, out: Callable[[str], None] = print) -> None:
        self.out = out
        self.steps = 0

    def step(self, title: str) -> None:
        """Start a numbered step."""
        self.steps += 1
        self.out("")
        self.out(f"[{self.steps}] {title}")

    def line(self, text: str, indent: int = 1) -> None:
        """One line of a step."""
        self.out("    " * indent + text)

    def model_turn(self, message: Message | None) -> None:
        """What the model asked for (or said)."""
        if message is None:
            return
        if message.tool_calls:
            self.line("The model calls:")
            for call in message.tool_calls:
                self.line(f"- {describe_call(call)}", 2)
        elif message.content:
            self.line(f"The model replies: {message.content}")

    def waiting(self, questions: Sequence[Question], tasks: Sequence[Task]) -> None:
        """What the chat waits on."""
        if not questions and not tasks:
            self.line("Nothing waits.")
            return
        self.line("The chat waits on:")
        for question in questions:
            if question.kind == "approval":
                self.line(f"? approval: {describe_call(question.tool_call)}", 2)
            else:
                self.line(f"? question from {describe_call(question.tool_call)}: {question.message}", 2)
                for field in question.fields:
                    self.line(f"  - {describe_field(field)}", 2)
        for task in tasks:
            self.line(f"... task: {describe_task(task)}", 2)

    def decided(self, question: Question, recorded: bool) -> None:
        """A person's decision, and whether it was recorded."""
        if question.decision == "accept" and question.kind == "approval":
            what = f"approved {describe_call(question.tool_call)}"
        elif question.decision == "accept":
            values = ", ".join(f"{name}={value}" for name, value in (question.answer or {}).items())
            what = f"answered {question.message!r} with {values}"
        elif question.decision == "decline":
            what = f"declined {describe_call(question.tool_call)}" + (f" ({question.note})" if question.note else "")
        else:
            what = f"{question.decision} {describe_call(question.tool_call)}"
        self.line(("+ " if recorded else "- (too late) ") + what)

    def results(self, messages: Sequence[Message], calls: dict[str, ToolCall]) -> None:
        """Tool results that arrived in this step."""
        for message in messages:
            if message.role == "tool" and message.tool_call_id is not None:
                call = calls.get(message.tool_call_id)
                self.line(f"-> {call.name if call else message.tool_call_id}: {message.content}")


async def run(out: Callable[[str], None] = print) -> Chat:
    """Run the demo story, narrating to ``out``; returns the finished chat."""
    chat = build_chat()
    narrate = Narrator(out)
    out("tarry demo: one chat whose tool calls wait (in memory, with a scripted model)")

    async def carry_on(title: str) -> None:
        narrate.step(title)
        seen = len(chat.messages)
        reply = await chat.complete()
        calls = {call.id: call for message in chat.messages for call in message.tool_calls}
        narrate.results(chat.messages[seen:], calls)
        if chat.waiting:
            narrate.waiting(await chat.pending_questions(), await chat.pending_tasks())
        else:
            narrate.model_turn(reply)

    narrate.step(f"You: {USER_TEXT}")
    parked = await chat.ask(USER_TEXT)
    narrate.model_turn(parked)
    calls = {call.id: call for message in chat.messages for call in message.tool_calls}
    narrate.results(chat.messages[2:], calls)
    narrate.waiting(await chat.pending_questions(), await chat.pending_tasks())

    narrate.step("A person decides what waits on them")
    for question in await chat.pending_questions():
        if question.kind == "approval":
            recorded = await chat.approve(question)
        else:
            recorded = await chat.answer(question, time="20:00", party="4")
        narrate.decided(question, recorded)

    await carry_on("complete(): the approved call runs, the answered call resumes, the task is checked once")
    await carry_on("complete() again: the task has finished, so the model gets every result")
    narrate.line("Nothing waits any more." if not chat.waiting else "Still waiting.", 0)
    return chat
