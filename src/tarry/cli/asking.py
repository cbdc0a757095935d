"""Asking the person at the terminal about what a call waits on: approvals, forms and URLs."""

from __future__ import annotations

import shlex
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from rich.console import Console

from tarry.chat import Chat
from tarry.cli.arguments import json_pairs
from tarry.cli.identity import os_user
from tarry.cli.lines import LineReader
from tarry.cli.output import describe_call, escape, field_hint, proposal_changes, shown_url
from tarry.edits import counted_votes
from tarry.errors import (
    InvalidAnswerError,
    NotAllowedError,
    NotRespondableError,
    ProposalChangedError,
    QuestionExpiredError,
    ToolCallRunningError,
)
from tarry.questions import Field, Question

YES = ("y", "yes")
NO = ("n", "no")
RESULT = ("r", "result")
"""``r: RESULT`` at an approval's prompt gives the call's result instead of running its tool."""
DECLINE = "/decline"


class Asker:
    """Puts a chat's questions to the person at the terminal and records their decisions."""

    def __init__(self, chat: Chat, reader: LineReader, out: Console) -> None:
        self.chat = chat
        self.who = os_user()
        """Who the person at the terminal decides as: their OS user (verified)."""
        self.reader = reader
        self.out = out
        self.passed: set[str] = set()
        """The ids of questions this person may not decide (their policy refused them): not asked again."""

    def may_ask(self, question: Question) -> bool:
        """Whether to put ``question`` to the person: not when they approved what it proposes already, or may not
        decide it."""
        voted = any(vote.principal.id == self.who.id for vote in counted_votes(question, question.proposal))
        return not voted and question.id not in self.passed

    async def ask(self, question: Question) -> None:
        """Ask ``question`` until a decision is recorded (or the person leaves: end of input)."""
        try:
            if question.kind == "approval":
                await self._approval(question)
            elif question.kind == "form" and not question.fields:  # nothing to fill in: still the person's yes
                await self._confirm(question)
            elif question.kind == "url":
                await self._url(question)
            else:
                await self._form(question)
        except QuestionExpiredError:
            self.out.print("[red]Too late: the question expired.[/]")
        except (ToolCallRunningError, NotRespondableError, InvalidAnswerError) as error:
            self.out.print(f"[red]{escape(str(error))}[/]")
        except NotAllowedError as error:
            self.passed.add(question.id)
            self.out.print(f"[red]Not recorded: {escape(str(error))}[/]")
        except ProposalChangedError as error:  # someone changed the arguments while the prompt showed them
            self.out.print(f"[red]Not recorded: {escape(str(error))}[/]")
            await self.ask(await self.chat.question(question))  # asked again, showing what it proposes now

    async def _line(self, prompt: str) -> str:
        line = await self.reader.readline(prompt)
        if line is None:
            raise EOFError
        return line.strip()

    async def _approval(self, question: Question) -> None:
        self.out.print(f"[bold yellow]?[/] Approve {escape(describe_call(question.tool_call))}?")
        changes = proposal_changes(question)
        if changes:
            self.out.print(f"  [yellow]{escape(f'as a person changed it: {changes}')}[/]")
        change = partial(self._approve_changed, question) if question.editable is not None else None
        await self._yes_or_no(question, partial(self._approve, question), partial(self._respond, question), change)

    async def _approve_changed(self, question: Question, changes: str) -> None:
        """``y: NAME=VALUE ...``: approve with those arguments changed (each value JSON when it parses, else text)."""
        try:
            arguments = json_pairs(shlex.split(changes), "y:")
        except ValueError as error:
            raise InvalidAnswerError({"arguments": str(error)}) from None
        await self._approve(question, arguments)

    async def _approve(self, question: Question, arguments: dict[str, Any] | None = None) -> None:
        # For the arguments this prompt showed: if someone changed them meanwhile, nothing is recorded.
        seen = question.proposal_digest
        recorded = await self.chat.approve(question, arguments=arguments, by=self.who, channel="cli", seen=seen)
        counted = await self._still_waiting(question) if recorded and question.policy is not None else None
        if counted is not None and counted.policy is not None:
            self.out.print(
                f"  [green]Your approval was counted: {len(counted_votes(counted, counted.proposal))} of "
                f"{counted.policy.count}; "
                "the call runs once enough people approved it.[/]"
            )
            return
        self._recorded(recorded, "approved")

    async def _respond(self, question: Question, result: str) -> None:
        recorded = await self.chat.respond(question, result, by=self.who, channel="cli")
        self._recorded(recorded, "gave the result in the tool's place; the tool does not run")

    async def _still_waiting(self, question: Question) -> Question | None:
        """``question`` as the chat now sees it while it still waits (an approval counted, not yet enough)."""
        return next((waiting for waiting in await self.chat.pending_questions() if waiting.id == question.id), None)

    async def _confirm(self, question: Question) -> None:
        """A form without fields (an MCP server's own approval, say): accepted only on the person's explicit yes."""
        self.out.print(f"[bold yellow]?[/] {escape(question.message)}")
        self.out.print(f"  [dim]asked by {escape(describe_call(question.tool_call))}[/]")

        async def accept() -> None:
            self._recorded(await self.chat.answer(question, by=self.who, channel="cli"), "accepted")

        await self._yes_or_no(question, accept)

    async def _yes_or_no(
        self,
        question: Question,
        accept: Callable[[], Awaitable[None]],
        respond: Callable[[str], Awaitable[None]] | None = None,
        change: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        """Ask y or n (n with an optional note for the model); only a y calls ``accept``, which records and says so.
        With ``respond`` (an approval), ``r: RESULT`` gives the call's result instead of running its tool; with
        ``change`` (an approval whose tool allows changes), ``y: NAME=VALUE ...`` approves with those changed."""
        offer = ", r: RESULT = give the result instead" if respond is not None else ""
        if change is not None:
            offer = ", y: NAME=VALUE ... = yes, with those arguments changed" + offer
        hint = f"  Type y, n, or n: followed by a note{', or r: followed by the result' if respond else ''}."
        if change is not None:
            hint += " Or y: NAME=VALUE ... to change arguments."
        while True:
            reply = await self._line(f"  y = yes, n = no, n: NOTE = no, telling the model why{offer}> ")
            chosen = self._chosen(reply, question, accept, respond, change)
            if chosen is not None:
                await chosen
                return
            self.out.print(hint)

    def _chosen(
        self,
        reply: str,
        question: Question,
        accept: Callable[[], Awaitable[None]],
        respond: Callable[[str], Awaitable[None]] | None,
        change: Callable[[str], Awaitable[None]] | None,
    ) -> Awaitable[None] | None:
        """What ``reply`` at a yes-or-no prompt asks to do, or ``None`` when it is nothing the prompt offers."""
        choice, _, text = reply.partition(":")
        choice, text = choice.strip().lower(), text.strip()
        if choice in YES:
            return accept() if not text else change(text) if change is not None else None
        if choice in NO:
            return self._decline(question, text or None)
        if choice in RESULT and text and respond is not None:
            return respond(text)
        return None

    async def _url(self, question: Question) -> None:
        assert question.url is not None
        shown = shown_url(question.url)
        self.out.print(f"[bold yellow]?[/] {escape(question.message)}")
        self.out.print(f"  {escape(describe_call(question.tool_call))} asks you to open:")
        self.out.print(f"  [bold]{escape(shown)}[/]")
        if shown != question.url:
            self.out.print("  [dim](the host is shown as punycode, the letters it really has)[/]")
        self.out.print("  tarry opens nothing: open it yourself if you trust it.")
        while True:
            reply = (await self._line("  y = I agree to go on, n = decline> ")).lower()
            if reply in YES:
                self._recorded(await self.chat.answer(question, by=self.who, channel="cli"), "agreed")
                return
            if reply in NO:
                await self._decline(question, None)
                return
            self.out.print("  Type y or n.")

    async def _form(self, question: Question) -> None:
        self.out.print(f"[bold yellow]?[/] {escape(question.message)}")
        self.out.print(
            f"  [dim]asked by {escape(describe_call(question.tool_call))}; {DECLINE} [NOTE] at any prompt declines[/]"
        )
        values: dict[str, Any] = {}
        for field in question.fields:
            assert field.name is not None
            value = await self._field(field)
            if isinstance(value, _Declined):
                await self._decline(question, value.note)
                return
            if value is not None:
                values[field.name] = value
        try:
            recorded = await self.chat.answer(question, values, by=self.who, channel="cli")
        except InvalidAnswerError as error:  # only what spans fields is left to find here
            for name, problem in error.errors.items():
                self.out.print(f"  [red]{escape(name)}: {escape(problem)}[/]")
            await self._form(question)
            return
        self._recorded(recorded, "answered")

    async def _field(self, field: Field) -> Any:
        """One field's checked value, asked again until it is valid; ``None`` to use the default."""
        if field.description and field.description != field.label:
            self.out.print(f"  [dim]{escape(field.description)}[/]")
        while True:
            text = await self._line(f"  {field.label} ({field_hint(field)})> ")
            if text == DECLINE or text.startswith(DECLINE + " "):
                return _Declined(text[len(DECLINE) :].strip() or None)
            if not text:
                if field.default is not None or not field.required:
                    return None
                self.out.print("  [red]a value is required[/]")
                continue
            raw: Any = [part.strip() for part in text.split(",")] if field.type == "array" else text
            try:
                return field.check(raw)
            except ValueError as error:
                self.out.print(f"  [red]{escape(str(error))}[/]")

    async def _decline(self, question: Question, note: str | None) -> None:
        recorded = await self.chat.decline(question, note, by=self.who, channel="cli")
        self._recorded(recorded, "declined" + (f" (note: {note})" if note else ""))

    def _recorded(self, recorded: bool, what: str) -> None:
        if recorded:
            self.out.print(f"  [green]{escape(what)}[/]")
        else:
            self.out.print("  [red]Someone else decided this question first; their decision stands.[/]")


class _Declined:
    def __init__(self, note: str | None) -> None:
        self.note = note
