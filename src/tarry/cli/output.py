"""How ``tarry`` prints: rich on a terminal, plain text otherwise, JSON with ``--json``."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

from rich.console import Console
from rich.markup import escape

from tarry.approvals import standing
from tarry.bridges import new_steps
from tarry.demo import describe_call
from tarry.messages import Message, ToolCall
from tarry.questions import Field, Question
from tarry.store.listing import ChatSummary
from tarry.store.waiting import WaitingTask

__all__ = ["console", "describe_call", "escape", "print_json"]


def console(stderr: bool = False) -> Console:
    """A console that styles only when it writes to a terminal (rich's own check)."""
    return Console(stderr=stderr, highlight=False, soft_wrap=True)


def print_json(value: Any) -> None:
    """``value`` as indented JSON on stdout."""
    sys.stdout.write(json.dumps(value, indent=2, ensure_ascii=False) + "\n")


_Item = TypeVar("_Item")


def print_listing(
    items: Sequence[_Item], data: Callable[[_Item], Any], line: Callable[[_Item], str], *, as_json: bool, empty: str
) -> None:
    """A listing from a shell: each item's ``data`` as JSON with ``as_json``, else its ``line`` (``empty`` when
    there is none)."""
    if as_json:
        print_json([data(item) for item in items])
        return
    out = console()
    if not items:
        out.print(empty)
    for item in items:
        out.print(escape(line(item)))


def iso(moment: datetime | None) -> str | None:
    """An aware datetime as ISO 8601 text, or ``None``."""
    return None if moment is None else moment.isoformat()


def call_json(call: ToolCall | None) -> dict[str, Any] | None:
    """A tool call as JSON: its id, its tool's name, its arguments as the model sent them."""
    return None if call is None else {"id": call.id, "name": call.name, "arguments": dict(call.arguments)}


def chat_json(summary: ChatSummary) -> dict[str, Any]:
    """One line of ``tarry chats --json``."""
    return {
        "id": summary.id,
        "agent": summary.agent,
        "model": summary.model,
        "created_at": iso(summary.created_at),
        "messages": summary.messages,
        "waiting": summary.waiting,
        "open_calls": summary.open_calls,
        "questions": summary.questions,
        "cancel_requested_at": iso(summary.cancel_requested_at),
    }


def task_json(waiting: WaitingTask) -> dict[str, Any]:
    """One line of ``tarry tasks --json``."""
    task = waiting.task
    return {
        "chat_id": waiting.chat_id,
        "tool_call": call_json(task.tool_call),
        "status": str(task.status),
        "status_message": task.status_message,
        "poll_interval": task.poll_interval,
        "since": iso(waiting.since),
        "next_check": iso(waiting.next_check),
    }


def shown_url(url: str) -> str:
    """``url`` with its host in punycode, so a look-alike host (``аpple.com``) shows what it really is."""
    parts = urlsplit(url)
    host = parts.hostname
    if not host or host.isascii():
        return url
    netloc = parts.netloc
    at = netloc.rfind("@") + 1
    start = netloc.lower().find(host, at)
    if start < 0:
        return url
    netloc = netloc[:start] + _ascii_host(host) + netloc[start + len(host) :]
    return urlunsplit(parts._replace(netloc=netloc))


def _ascii_host(host: str) -> str:
    """The host as IDNA writes it; a name IDNA refuses is still shown in ASCII, label by label."""
    try:
        return host.encode("idna").decode("ascii")
    except UnicodeError:
        return ".".join(
            label if label.isascii() else "xn--" + label.encode("punycode").decode("ascii") for label in host.split(".")
        )


def field_hint(field: Field) -> str:
    """What a prompt for ``field`` says about the values it takes: type or choices, bounds, format, default."""
    parts = (
        _kind_hint(field),
        _bounds_hint(field),
        _length_hint(field),
        field.format,
        None if field.pattern is None else f"matching {field.pattern}",
        _default_hint(field),
    )
    return "; ".join(part for part in parts if part is not None)


def _kind_hint(field: Field) -> str:
    if field.choices is None:
        return field.type
    choices = ", ".join(_choice(field, value) for value in field.choice_values)
    return f"any of {choices}; comma-separated" if field.type == "array" else f"one of {choices}"


def _bounds_hint(field: Field) -> str | None:
    if field.minimum is None and field.maximum is None:
        return None
    low = "" if field.minimum is None else f"{field.minimum:g}"
    high = "" if field.maximum is None else f"{field.maximum:g}"
    return f"{low}..{high}"


def _length_hint(field: Field) -> str | None:
    if field.min_length is None and field.max_length is None:
        return None
    unit = "choices" if field.type == "array" else "characters"
    return f"{field.min_length or 0}..{'' if field.max_length is None else field.max_length} {unit}"


def _default_hint(field: Field) -> str | None:
    if field.default is not None:
        default = ", ".join(map(str, field.default)) if isinstance(field.default, list) else field.default
        return f"default {default}"
    return None if field.required else "optional"


def _choice(field: Field, value: Any) -> str:
    title = field.choice_title(value)
    return str(value) if title == str(value) else f"{value} = {title}"


def question_lines(question: Question) -> list[str]:
    """A question as the lines ``tarry pending`` and ``tarry chat`` print (rich markup escaped)."""
    call = escape(describe_call(question.tool_call))
    lines = [f"[bold]{question.id}[/]  {question.kind}  {call}"]
    if question.kind != "approval":
        lines.append(f"    {escape(question.message)}")
    if question.kind == "url" and question.url:
        lines.append(f"    url: {escape(shown_url(question.url))}")
    lines.extend(f"    - {escape(f'{field.name} ({field_hint(field)})')}" for field in question.fields)
    changes = proposal_changes(question)
    if changes:
        lines.append(f"    {escape(f'proposed with changed arguments: {changes}')}")
    if question.editable is not None and question.decision is None:
        names = ", ".join(question.editable.get("properties") or {})
        lines.append(f"    {escape(f'may change: {names} (approve with --set NAME=VALUE)')}")
    if question.proposal_digest is not None and question.decision is None:
        lines.append(f"    {escape(f'arguments digest: {question.proposal_digest} (approve with --seen DIGEST)')}")
    policy = standing(question)
    if policy is not None:
        lines.append(f"    {escape(policy)}")
    where = [f"chat {question.chat_id}"]
    if question.source:
        where.append(f"asked by {question.source}")
    if question.expires_at is not None:
        where.append(f"expires {question.expires_at:%Y-%m-%d %H:%M:%S} UTC")
    lines.append(f"    [dim]{escape('; '.join(where))}[/]")
    return lines


def proposal_changes(question: Question) -> str:
    """The arguments a person changed in what ``question`` proposes now, as ``name=value (was value)``; empty when
    it proposes the call as the model made it."""
    proposal, call = question.proposal, question.tool_call
    if proposal is None or call is None:
        return ""
    was = dict(call.arguments)
    changed = [name for name in proposal if name not in was or proposal[name] != was[name]]
    return ", ".join(
        f"{name}={proposal[name]!r}" + (f" (was {was[name]!r})" if name in was else "") for name in changed
    )


def transcript_lines(messages: Sequence[Message], start: int = 0) -> list[str]:
    """The transcript from message ``start`` on, one rich-markup line per message or call."""
    names = {call.id: call.name for message in messages for call in message.tool_calls}
    lines: list[str] = []
    for message, steps in list(zip(messages, new_steps(messages), strict=True))[start:]:
        lines.extend(f"  [dim]run {escape(step.role)}> {escape(step.text)}[/]" for step in steps)
        if message.role == "user":
            lines.append(f"[cyan]you> {escape(message.content)}[/]")
        elif message.role == "assistant":
            if message.content:
                lines.append(f"[bold green]model>[/] {escape(message.content)}")
            lines.extend(f"  [yellow]call {escape(describe_call(call))}[/]" for call in message.tool_calls)
        else:
            name = names.get(message.tool_call_id or "", message.tool_call_id)
            lines.append(f"  [magenta]{escape(str(name))} -> {escape(message.content)}[/]")
    return lines
