"""``tarry demo``: one chat whose tool calls wait, carried across three real processes on SQLite.

The model (a [`ScriptedModel`][tarry.testing.ScriptedModel], so no network and no keys) calls three
tools in one turn:

- ``transfer_money`` needs a person's approval before it runs;
- ``book_table`` asks a person when to book, then books;
- ``render_video`` returns a [`Task`][tarry.Task] that finishes on a later ``complete()``.

The story is seed 004's: one process runs the chat until it parks; a second lists what waits
from the database alone and answers; a third carries the chat on to the final reply. Each
part runs as ``python -m tarry.demo PART URL [CHAT_ID]`` in its own OS process; ``tarry demo``
starts them one after the other and prints what each says. A ``Narrator`` does the printing.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from tarry.chat import Chat
from tarry.messages import Message, ToolCall
from tarry.questions import Field, Question
from tarry.store import Store
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


CALLS: list[dict[str, object]] = [
    {"name": "transfer_money", "arguments": {"amount": 20, "to": "Bob"}},
    {"name": "book_table", "arguments": {"restaurant": "Luigi's"}},
    {"name": "render_video", "arguments": {"name": "holiday"}},
]
INSTRUCTIONS = "You help with errands."


def scripted_turn(messages: list[Message]) -> str | list[dict[str, object]]:
    """The scripted model: calls the three tools after the user speaks, sums up once the results are in.

    It reads only the transcript, so every process can carry the chat on with a fresh model.
    """
    return CALLS if messages[-1].role == "user" else final_reply(messages)


def build_model() -> ScriptedModel:
    """The demo's model."""
    return ScriptedModel([scripted_turn] * 10, name="demo")


def build_tools() -> list[Tool]:
    """The demo's three tools."""
    return [TransferMoney(), BookTable(), RenderVideo()]


def build_chat() -> Chat:
    """The demo's chat in memory: the scripted model and the three tools."""
    return Chat(model=build_model(), tools=build_tools(), instructions=INSTRUCTIONS)


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


def calls_of(chat: Chat) -> dict[str, ToolCall]:
    """Every call of the chat by id."""
    return {call.id: call for message in chat.messages for call in message.tool_calls}


async def park(url: str, chat_id: str, out: Callable[[str], None] = print) -> None:
    """Process 1: load the chat, ask, and run until every call waits."""
    async with Store(url) as store:
        chat = await store.load_chat(chat_id, build_model(), build_tools())
        narrate = Narrator(out)
        narrate.line(f"You: {USER_TEXT}", 0)
        parked = await chat.ask(USER_TEXT)
        narrate.model_turn(parked)
        narrate.results(chat.messages[2:], calls_of(chat))
        narrate.waiting(await chat.pending_questions(), await chat.pending_tasks())
        narrate.line("The chat is parked in the database; this process exits.", 0)


async def answer(url: str, out: Callable[[str], None] = print) -> None:
    """Process 2: list what waits from the database alone (no model, no tools) and answer it."""
    async with Store(url) as store:
        narrate = Narrator(out)
        questions = await store.pending_questions()
        narrate.line(f"The database lists {len(questions)} question(s) across all chats.", 0)
        narrate.waiting(questions, await store.pending_tasks())
        for question in questions:
            if question.kind == "approval":
                recorded = await store.approve(question.id)
            else:
                recorded = await store.answer(question.id, time="20:00", party="4")
            narrate.decided(await store.question(question.id), recorded)
        again = await store.approve(questions[0].id)
        narrate.line(f"Approving the transfer a second time records nothing (returned {again}).", 0)


async def finish(url: str, chat_id: str, out: Callable[[str], None] = print) -> None:
    """Process 3: load the chat and carry it on until nothing waits."""
    async with Store(url) as store:
        chat = await store.load_chat(chat_id, build_model(), build_tools())
        narrate = Narrator(out)
        while True:
            seen = len(chat.messages)
            reply = await chat.complete()
            narrate.line("complete():", 0)
            narrate.results(chat.messages[seen:], calls_of(chat))
            if not chat.waiting:
                narrate.model_turn(reply)
                break
            narrate.waiting(await chat.pending_questions(), await chat.pending_tasks())
        narrate.line("Nothing waits any more.", 0)


PARTS = (
    ("park", "Process 1 runs the chat until it parks"),
    ("answer", "Process 2 lists what waits from the database and answers it"),
    ("finish", "Process 3 carries the chat on to its final reply"),
)


async def create(url: str) -> str:
    """Set up the database and create the demo's chat; returns its id."""
    async with Store(url) as store:
        await store.setup()
        chat = await store.create_chat(build_model(), build_tools(), INSTRUCTIONS)
        return chat.id


def run(url: str | None = None, out: Callable[[str], None] = print) -> int:
    """Run the whole story: create the chat, then each part in its own OS process; returns the exit status."""
    folder = None
    if url is None:
        folder = Path(tempfile.mkdtemp(prefix="tarry-demo-"))
        url = f"sqlite:///{folder / 'tarry.db'}"
    out("tarry demo: one chat whose tool calls wait, carried across three processes")
    out(f"Database: {url}")
    chat_id = asyncio.run(create(url))
    narrate = Narrator(out)
    for part, title in PARTS:
        narrate.step(title)
        arguments = [sys.executable, "-m", "tarry.demo", part, url] + ([] if part == "answer" else [chat_id])
        finished = subprocess.run(arguments, capture_output=True, text=True, check=False)
        pid_note = f"(a new process: python -m tarry.demo {part})"
        narrate.line(pid_note)
        for line in finished.stdout.splitlines():
            narrate.line(line)
        if finished.returncode != 0:
            out(finished.stderr)
            return finished.returncode
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


def main(argv: Sequence[str]) -> int:
    """``python -m tarry.demo PART URL [CHAT_ID]``: run one part of the story in this process."""
    part, url, *rest = argv
    if part == "park":
        asyncio.run(park(url, rest[0]))
    elif part == "answer":
        asyncio.run(answer(url))
    elif part == "finish":
        asyncio.run(finish(url, rest[0]))
    else:
        raise SystemExit(f"Unknown demo part {part!r}; expected park, answer or finish")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
