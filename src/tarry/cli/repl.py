"""``tarry chat``: a stored chat in the terminal whose waiting tool calls ask the person inline."""

from __future__ import annotations

import argparse
import asyncio
import shlex
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

from rich.console import Console

from tarry.agents import Agent
from tarry.chat import Chat
from tarry.cli.arguments import json_pairs
from tarry.cli.asking import Asker
from tarry.cli.exits import Exit, fail
from tarry.cli.identity import install_may_decide
from tarry.cli.lines import LineReader
from tarry.cli.output import console, describe_call, escape, transcript_lines
from tarry.errors import ProviderError
from tarry.messages import Message, MessageDone, TextDelta, ToolCallEvent
from tarry.questions import Question
from tarry.store import Store
from tarry.tasks import Task
from tarry.tools import ToolSource

LOOK_AGAIN = 0.5
"""Seconds between two looks at the database for decisions made elsewhere and cancellation requests."""
MAX_TASK_WAIT = 5.0
"""The longest wait between two checks of a working task, whatever its ``poll_interval`` says."""


class Session:
    """The chat being shown, and what has been printed of it."""

    def __init__(self, chat: Chat, store: Store, reader: LineReader, out: Console) -> None:
        self.chat = chat
        self.store = store
        self.reader = reader
        self.out = out
        self.asker = Asker(chat, reader, out)
        self.shown = len(chat.messages)
        self.calls = {call.id: call for message in chat.messages for call in message.tool_calls}
        self.status: str | None = None

    async def converse(self) -> None:
        """Carry on what the chat left open, then take the user's lines until end of input."""
        if self.chat.waiting or (self.chat.messages and self.chat.messages[-1].role != "assistant"):
            await self._turn(None)
        while True:
            text = await self.reader.readline("you> ")
            if text is None:
                return
            if text.strip():
                await self._turn(text)

    async def _turn(self, text: str | None) -> None:
        """``carry_on``, saying so when a model request fails (the transcript keeps no trace of it)."""
        try:
            await self.carry_on(text)
        except ProviderError as error:
            self.out.print()
            self.out.print(f"[red]The model request failed: {escape(str(error))}[/]")

    async def carry_on(self, text: str | None) -> None:
        """Send ``text`` (if any) and carry the chat on until the model replied, asking what waits."""
        while True:
            await self._stream(text)
            text = None
            if not self.chat.waiting:
                return
            if await self._cancel_requested():
                return
            questions = await self.chat.pending_questions()
            if questions:
                mine = [question for question in questions if self.asker.may_ask(question)]
                for question in mine:
                    await self._ask(question)
                if not mine:  # each needs someone else's decision
                    await self._idle(f"waiting for others to decide: {_waiting_line(questions)}", LOOK_AGAIN)
                continue
            tasks = await self.chat.pending_tasks()
            await self._watch(tasks)

    async def _stream(self, text: str | None) -> None:
        """One ``chat.stream()``, answering questions a running call asks while it waits (MCP elicitations)."""
        run = asyncio.ensure_future(self._print_stream(text))
        try:
            while not run.done():
                done, _ = await asyncio.wait({run}, timeout=LOOK_AGAIN)
                if done:
                    break
                for question in await self.store.pending_questions(self.chat.id):
                    if question.tool_call is not None and question.tool_call.id in self._running_calls():
                        await self._ask(question)
        finally:
            if not run.done():
                run.cancel()
                with suppress(asyncio.CancelledError):
                    await run
        run.result()

    def _running_calls(self) -> set[str]:
        return {call_id for call_id, record in self.chat.records.items() if record.open}

    async def _print_stream(self, text: str | None) -> None:
        speaking = False
        async for event in self.chat.stream(text):
            self._print_results()
            if isinstance(event, TextDelta):
                if not speaking:
                    self.out.print("[bold green]model>[/] ", end="")
                    speaking = True
                self.out.print(event.text, end="", markup=False)
            elif isinstance(event, ToolCallEvent):
                if speaking:
                    self.out.print()
                    speaking = False
                self.calls[event.call.id] = event.call
                self.out.print(f"  [yellow]call {escape(describe_call(event.call))}[/]")
            elif isinstance(event, MessageDone) and speaking:
                self.out.print()
                speaking = False
        self._print_results()

    def _print_results(self) -> None:
        for message in self.chat.messages[self.shown :]:
            if message.role == "tool":
                self._print_result(message)
        self.shown = len(self.chat.messages)

    def _print_result(self, message: Message) -> None:
        call = self.calls.get(message.tool_call_id or "")
        name = call.name if call is not None else message.tool_call_id
        result = message.result()
        if isinstance(result, dict) and "error" in result:
            note = f" (note: {result['note']})" if result.get("note") else ""
            self.out.print(f"  [red]{escape(str(name))}: {escape(str(result['error']))}{escape(note)}[/]")
        else:
            self.out.print(f"  [magenta]{escape(str(name))} -> {escape(message.content)}[/]")

    async def _ask(self, question: Question) -> None:
        """Ask ``question`` at the terminal, giving way when it is decided elsewhere first."""
        asking = asyncio.ensure_future(self.asker.ask(question))
        elsewhere = asyncio.ensure_future(self._decided_elsewhere(question.id))
        try:
            done, _ = await asyncio.wait({asking, elsewhere}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pending in (asking, elsewhere):
                if not pending.done():
                    pending.cancel()
                    with suppress(asyncio.CancelledError):
                        await pending
        if asking in done:
            asking.result()
            return
        what = elsewhere.result()
        self.out.print()
        self.out.print(f"  [cyan]Decided elsewhere meanwhile: {escape(what)}[/]")

    async def _decided_elsewhere(self, question_id: str) -> str:
        while True:
            await asyncio.sleep(LOOK_AGAIN)
            current = await self.store.question(question_id)
            if current.decision == "accept":
                return "approved" if current.kind == "approval" else f"answered {current.answer}"
            if current.decision is not None:
                return current.decision + (f" (note: {current.note})" if current.note else "")
            if await self._cancel_requested(act=False):
                return "the chat's cancellation was asked for"

    async def _watch(self, tasks: list[Task]) -> None:
        """Show the working tasks on a status line until it is time to check them again."""
        wait = min([task.poll_interval or 1.0 for task in tasks] or [LOOK_AGAIN])
        wait = min(max(wait, 0.1), MAX_TASK_WAIT)
        line = "; ".join(_task_line(task) for task in tasks) or "waiting on a call another process runs"
        await self._idle(line, wait)

    async def _idle(self, line: str, wait: float) -> None:
        """Show ``line`` on the status line for ``wait`` seconds, or until the chat's cancellation is asked for."""
        with self._status(line):
            waited = 0.0
            while waited < wait:
                step = min(LOOK_AGAIN, wait - waited)
                await asyncio.sleep(step)
                waited += step
                if await self._cancel_requested(act=False):
                    return

    @contextmanager
    def _status(self, line: str) -> Iterator[None]:
        if self.out.is_terminal and not self.out.is_dumb_terminal:
            with self.out.status(escape(line)):
                yield
            return
        if line != self.status:  # plain output: one line per change
            self.out.print(f"  ... {line}", markup=False)
            self.status = line
        yield

    async def _cancel_requested(self, *, act: bool = True) -> bool:
        """True when someone asked (``tarry cancel``) for the chat to be cancelled; with ``act``, cancel it."""
        summary = await self.store.chat_summary(self.chat.id)
        if summary.cancel_requested_at is None or not self.chat.waiting:
            return False
        if act:
            await self.chat.cancel()
            self._print_results()
            self.out.print("[cyan]The chat was cancelled from elsewhere; its waiting calls are closed.[/]")
        return True


def _waiting_line(questions: list[Question]) -> str:
    def one(question: Question) -> str:
        votes = f" ({len(question.votes)} of {question.policy.count} approvals)" if question.policy else ""
        return describe_call(question.tool_call) + votes if question.tool_call else question.message

    return "; ".join(one(question) for question in questions)


def _task_line(task: Task) -> str:
    detail = f": {task.status_message}" if task.status_message else ""
    return f"{describe_call(task.tool_call)} is {task.status}{detail}"


def load_agent(spec: str) -> Agent:
    """The one agent ``--agent module:name`` names."""
    from tarry.jobs.command import load_agents

    agents = load_agents([spec])
    if len(agents) != 1:
        raise ValueError(f"--agent {spec} names {len(agents)} agents; name exactly one")
    return agents[0]


def mcp_servers(specs: list[str]) -> list[ToolSource]:
    """MCP servers from ``--mcp`` options: an ``http(s)://`` URL, else a command line."""
    if not specs:
        return []
    from tarry.mcp import MCPServer

    return [
        MCPServer(url=spec) if spec.startswith(("http://", "https://")) else MCPServer(command=shlex.split(spec))
        for spec in specs
    ]


def resume_command(arguments: argparse.Namespace, chat_id: str) -> str:
    """The command line that carries this chat on later."""
    words = ["tarry", "chat", "--resume", chat_id]
    for option in ("url", "agent", "model"):
        value = getattr(arguments, option)
        if value:
            words += [f"--{option}", value]
    for spec in arguments.mcp:
        words += ["--mcp", spec]
    return shlex.join(words)


async def open_chat(store: Store, arguments: argparse.Namespace, tools: list[Any]) -> Chat:
    """The chat to talk in: the one ``--resume`` names, or a new one."""
    agent = load_agent(arguments.agent) if arguments.agent else None
    model: Any = arguments.model
    if agent is not None:
        tools = [*agent.tools, *tools]
        if model is None:
            model = agent.make_model()
    if arguments.resume:
        instructions = arguments.instructions or (agent.instructions if agent is not None else None)
        return await store.load_chat(arguments.resume, model, tools, instructions)
    if model is None:
        raise ValueError(f"The agent {arguments.agent} has no model: give one with --model PROVIDER:MODEL")
    return await store.create_chat(
        model,
        tools,
        arguments.instructions,
        tool_choice=arguments.tool_choice,
        settings=model_settings(arguments.setting),
        agent=agent,
    )


def model_settings(pairs: list[str]) -> dict[str, Any]:
    """``--setting NAME=VALUE`` options as model settings: each value as JSON when it parses, else as text."""
    return json_pairs(pairs, "--setting")


async def run(arguments: argparse.Namespace, started: list[str]) -> None:
    """Open the store and the chat, then converse; ``started`` receives the chat's id once it exists."""
    out = console()
    tools = mcp_servers(arguments.mcp)
    reader = LineReader()
    try:
        async with Store(arguments.url) as store:
            install_may_decide(store, arguments.may_decide)  # the policy of approvals that name who may decide
            await store.setup()
            chat = await open_chat(store, arguments, tools)
            started.append(chat.id)
            session = Session(chat, store, reader, out)
            out.print(f"[dim]Chat {chat.id} in {escape(store.url)}. Ctrl-C parks it; Ctrl-D leaves.[/]")
            if arguments.resume:
                for line in transcript_lines(chat.messages):
                    out.print(line)
            reader.start()
            try:
                await session.converse()
            finally:
                reader.stop()
    finally:
        for server in tools:
            close = getattr(server, "close", None)
            if close is not None:
                with suppress(Exception):
                    await close()


def main(arguments: argparse.Namespace) -> int:
    """The ``tarry chat`` command; returns the exit status."""
    if not (arguments.model or arguments.agent or arguments.resume):
        print("tarry chat: a new chat needs --model PROVIDER:MODEL or --agent MODULE:NAME", file=sys.stderr)
        return int(Exit.USAGE)
    started: list[str] = []
    try:
        asyncio.run(run(arguments, started))
    except KeyboardInterrupt:
        print(file=sys.stderr)
        if started:
            print(f"Parked chat {started[0]}. Resume it with:", file=sys.stderr)
            print(f"  {resume_command(arguments, started[0])}", file=sys.stderr)
        return int(Exit.INTERRUPTED)
    except EOFError:
        pass
    except Exception as error:
        status = fail(error)
        if started:  # the chat is stored as it stood: say how to carry it on
            print(f"Chat {started[0]} is stored. Carry it on with: {resume_command(arguments, started[0])}")
        return status
    if started:
        print(f"Chat {started[0]} is stored. Carry it on with: {resume_command(arguments, started[0])}")
    return int(Exit.OK)
