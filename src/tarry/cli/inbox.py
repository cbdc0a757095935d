"""The inbox from a shell: ``tarry pending``, ``answer``, ``approve``, ``decline``, ``respond``, ``history``, ``chats``,
``show``, ``tasks`` and ``cancel``.

Each command opens the store, does one thing, and exits with a status from ``Exit``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from tarry.approvals import refusals
from tarry.bridges import transcript_of
from tarry.cli.exits import Exit, fail, refuse_database
from tarry.cli.identity import decider
from tarry.cli.output import (
    call_json,
    chat_json,
    console,
    describe_call,
    escape,
    print_json,
    proposal_changes,
    question_lines,
    task_json,
    transcript_lines,
)
from tarry.edits import counted_votes
from tarry.errors import InvalidAnswerError, NotDecidableError
from tarry.messages import Message
from tarry.principals import Principal
from tarry.questions import Question
from tarry.store import DecisionEvent, Store
from tarry.tasks import Task

Work = Callable[[Store, argparse.Namespace], Awaitable[int]]


def run(work: Work, arguments: argparse.Namespace) -> int:
    """Open the store named by ``--url``, run ``work`` on it, and turn errors into exit statuses."""

    refused = refuse_database(arguments.url)
    if refused is not None:
        return refused

    async def main() -> int:
        try:
            store = Store(arguments.url)
        except ValueError as error:  # not a database URL
            print(f"tarry: the database cannot be used: {error}", file=sys.stderr)
            return int(Exit.DATABASE)
        async with store:
            await full_ids(store, arguments)
            return await work(store, arguments)

    try:
        return asyncio.run(main())
    except Exception as error:
        return fail(error)


async def full_ids(store: Store, arguments: argparse.Namespace) -> None:
    """Expand the question and chat ids the command line gives as unique prefixes (as git does)."""
    for option, of in (("question", "question"), ("chat", "chat"), ("chat_id", "chat")):
        given = getattr(arguments, option, None)
        if given:
            setattr(arguments, option, await store.full_id(given, of=of))  # type: ignore[arg-type]


async def pending(store: Store, arguments: argparse.Namespace) -> int:
    """``tarry pending``: the questions that wait on a person, a page at a time with ``--limit``."""
    try:
        questions = await store.pending_questions(arguments.chat, limit=arguments.limit, cursor=arguments.cursor)
    except ValueError as error:  # a cursor that no page printed
        print(f"tarry: {error}", file=sys.stderr)
        return int(Exit.USAGE)
    more = None
    if questions.next_cursor is not None:
        chat = f" --chat {arguments.chat}" if arguments.chat else ""
        more = f"More: tarry pending{chat} --limit {arguments.limit} --cursor {questions.next_cursor}"
    if arguments.json:
        print_json([question.to_dict() for question in questions])
        if more:
            print(more, file=sys.stderr)
        return Exit.OK
    out = console()
    if not questions:
        out.print("Nothing waits on a person.")
    me = decider(arguments, store)
    for question in questions:
        for line in question_lines(question):
            out.print(line)
        if question.policy is not None:
            out.print(f"    {escape(await _yours(store, question, me))}")
    if more:
        out.print(more)
    return Exit.OK


async def _yours(store: Store, question: Question, me: Principal) -> str:
    """Whether ``me`` may decide a question with a policy, in words: the command to run, or why not."""
    # The application's check may block or use a sync verb of the store: it runs on a thread, as deciding does.
    cannot_approve, cannot_decline = await asyncio.to_thread(refusals, question, me, store.may_decide)
    if cannot_approve is None:
        return f"You ({me.label}) may approve it: tarry approve {question.id}"
    if cannot_decline is None:
        return f"You ({me.label}) may decline it, not approve it: {cannot_approve}"
    return f"Not yours to decide: {cannot_approve}"


def field_values(pairs: list[str]) -> dict[str, Any]:
    """``--field NAME=VALUE`` options as answer values; a name given twice collects a list (an array field)."""
    values: dict[str, Any] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise argparse.ArgumentTypeError(f"--field takes NAME=VALUE, got {pair!r}")
        if name in values:
            previous = values[name]
            values[name] = [*previous, value] if isinstance(previous, list) else [previous, value]
        else:
            values[name] = value
    return values


async def answer(store: Store, arguments: argparse.Namespace) -> int:
    """``tarry answer``: record an answer (an approval when the question is one and no value is given)."""
    by = decider(arguments, store)
    values = field_values(arguments.field)
    # The fields as one dict, so a field may be named "by" or "channel"; a value answers a one-field question.
    given = values if arguments.value is None else arguments.value
    decided = await store.decide(arguments.question, "accept", given, by=by, channel="cli")
    return await _decided(store, arguments.question, decided)


async def approve(store: Store, arguments: argparse.Namespace) -> int:
    """``tarry approve``: approve a question (accept it as it stands), or with ``--chat ID --all`` the chat's whole
    turn: every question its waiting calls wait on, all or none."""
    by = decider(arguments, store)
    if arguments.whole_turn:
        seen = await _shown(store, arguments.seen)
        try:
            approved = await store.approve_all(arguments.chat, by=by, channel="cli", seen=seen)
        except NotDecidableError as error:
            if seen is None or error.reason is not None or error.question_id in seen:
                raise
            print(f"tarry: {error}", file=sys.stderr)  # asked since the questions were shown: as if they changed
            return Exit.CHANGED
        if not approved:
            print(f"Nothing to approve: no call of chat {arguments.chat} waits on a question.")
        for question in approved:
            print(f"Recorded: approved ({describe_call(question.tool_call)}), question {question.id}.")
        return Exit.OK
    changes = changed_arguments(arguments.changes) if arguments.changes else None
    seen = arguments.seen[0] if arguments.seen else None
    decided = await store.decide(arguments.question, "accept", by=by, channel="cli", arguments=changes, seen=seen)
    return await _decided(store, arguments.question, decided)


async def _shown(store: Store, pairs: list[str] | None) -> dict[str, str] | None:
    """``--seen QUESTION_ID=DIGEST`` options as ``approve_all``'s ``seen``, each id given whole or as a prefix."""
    if not pairs:
        return None
    shown: dict[str, str] = {}
    for pair in pairs:
        question, _, digest = pair.partition("=")
        shown[await store.full_id(question, of="question")] = digest
    return shown


def changed_arguments(pairs: list[str]) -> dict[str, Any]:
    """``--set NAME=VALUE`` options as changed arguments: each value read as JSON when it parses, else as text."""
    changes: dict[str, Any] = {}
    for pair in pairs:
        name, _, value = pair.partition("=")
        try:
            changes[name] = json.loads(value)
        except ValueError:
            changes[name] = value
    return changes


async def decline(store: Store, arguments: argparse.Namespace) -> int:
    """``tarry decline``: decline a question; the note reaches the model."""
    by = decider(arguments, store)
    decided = await store.decide(arguments.question, "decline", note=arguments.note, by=by, channel="cli")
    return await _decided(store, arguments.question, decided)


async def respond(store: Store, arguments: argparse.Namespace) -> int:
    """``tarry respond``: answer a call's approval with the call's result (text, or JSON with ``--json``), given in
    place of running its tool."""
    by = decider(arguments, store)
    result: Any = arguments.result
    if arguments.as_json:
        try:
            result = json.loads(result)
        except ValueError as error:
            raise InvalidAnswerError({"result": f"--json needs a JSON value: {error}"}) from None
    seen = arguments.seen[0] if arguments.seen else None
    decided = await store.respond(arguments.question, result, by=by, channel="cli", seen=seen)
    return await _decided(store, arguments.question, decided)


async def history(store: Store, arguments: argparse.Namespace) -> int:
    """``tarry history``: the audit trail, oldest first; ``--jsonl`` one event a line, ``--verify`` its check."""
    if arguments.verify:
        return await _verify(store)
    events = await store.history(arguments.chat, arguments.question, after=arguments.after, limit=arguments.limit)
    if arguments.json:
        print_json([event.to_dict() for event in events])
        return Exit.OK
    if arguments.jsonl:
        for event in events:
            print(json.dumps(event.to_record(), ensure_ascii=False))
        return Exit.OK
    out = console()
    if not events:
        out.print("No decisions recorded.")
    for event in events:
        out.print(_event_line(event))
    return Exit.OK


def _event_line(event: DecisionEvent) -> str:
    """One event of the trail as ``tarry history`` prints it (rich markup)."""
    who = event.by.label if event.by is not None else "nobody known"
    what = f"{event.decision} {event.outcome}" + (f" ({event.detail})" if event.detail else "")
    if event.decision in ("remind", "escalate"):  # the approval's policy followed up: "reminded", "escalated to …"
        who, what = "its policy", event.detail or event.outcome
    if event.answer:
        what += ": " + ", ".join(f"{name}={value!r}" for name, value in event.answer.items())
    if event.note:
        what += f", note {event.note!r}"
    return (
        f"[dim]{event.id}[/]  {event.at:%Y-%m-%d %H:%M:%S}  [bold]{escape(who)}[/] via {event.channel}: "
        f"{escape(what)}  {escape(event.tool or event.kind)}  [dim]question {event.question_id}[/]"
    )


async def _verify(store: Store) -> int:
    """``tarry history --verify``: say whether the trail's hash chain holds, or where it breaks (exit 10)."""
    found = await store.verify_trail()
    if found is None:
        print("The audit trail is intact: every event is chained to the one before it as tarry wrote it.")
        return Exit.OK
    print(f"tarry: the audit trail was tampered with: {found.how} at event {found.id}: {found.detail}", file=sys.stderr)
    return Exit.TAMPERED


async def _decided(store: Store, question_id: str, decided: Question | None) -> int:
    """Say what the decision came to: ``decided``, the question as it left it, or (``None``) the decision that came
    first, read then."""
    if decided is not None:
        call = describe_call(decided.tool_call)
        if decided.decision is None and decided.policy is not None:
            counted = len(counted_votes(decided, decided.proposal))
            changes = proposal_changes(decided)
            what = f"{call} with {changes}" if changes else call
            print(f"Recorded: approval {counted} of {decided.policy.count} ({what}); it waits for more.")
        else:
            print(f"Recorded: {_decision_text(decided)} ({call}).")
        return Exit.OK
    question = await store.question(question_id)
    call = describe_call(question.tool_call)
    when = f" at {question.decided_at:%Y-%m-%d %H:%M:%S} UTC" if question.decided_at else ""
    who = question.decided_by.label if question.decided_by is not None else "nobody known"
    how = f" via {question.channel}" if question.channel else ""
    print(f"tarry: already decided by {who}{how}{when}: {_decision_text(question)} ({call})", file=sys.stderr)
    return Exit.TOO_LATE


def _decision_text(question: Question) -> str:
    if question.decision == "accept":
        if question.kind == "approval":
            changes = proposal_changes(question)
            return f"approved with {changes}" if changes else "approved"
        values = ", ".join(f"{name}={value!r}" for name, value in (question.answer or {}).items())
        return f"answered {values}" if values else "accepted"
    if question.decision == "decline":
        return "declined" + (f" with the note {question.note!r}" if question.note else "")
    if question.decision == "respond":
        return f"gave the result {(question.answer or {}).get('result')!r} in the tool's place"
    return str(question.decision)


async def chats(store: Store, arguments: argparse.Namespace) -> int:
    """``tarry chats``: the stored chats, oldest first (only waiting ones with ``--waiting``)."""
    found = await store.list_chats(waiting=arguments.waiting)
    if arguments.json:
        print_json([chat_json(summary) for summary in found])
        return Exit.OK
    out = console()
    if not found:
        out.print("No chats waiting." if arguments.waiting else "No chats.")
    for summary in found:
        state = "done"
        if summary.waiting:
            state = f"waiting: {summary.questions} question(s), {summary.open_calls} open call(s)"
        if summary.cancel_requested_at is not None:
            state += ", cancellation asked"
        made_by = summary.agent or summary.model or "no model"
        out.print(
            f"[bold]{summary.id}[/]  {summary.created_at:%Y-%m-%d %H:%M}  {escape(made_by)}  "
            f"{summary.messages} message(s)  {escape(state)}"
        )
    return Exit.OK


async def show(store: Store, arguments: argparse.Namespace) -> int:
    """``tarry show``: a chat's transcript, then what it waits on."""
    summary = await store.chat_summary(arguments.chat_id)
    # Only the transcript is read: no model, tools or tool choice to rebuild.
    messages = await store.messages(summary.id)
    questions = await store.pending_questions(summary.id)
    tasks = await store.waiting_tasks(summary.id)
    if arguments.json:
        print_json(
            {
                **chat_json(summary),
                "instructions": summary.instructions,
                "transcript": [_message_json(message) for message in messages],
                "pending_questions": [question.to_dict() for question in questions],
                "tasks": [task_json(waiting) for waiting in tasks],
            }
        )
        return Exit.OK
    out = console()
    out.print(f"[bold]Chat {summary.id}[/]  {escape(summary.agent or summary.model or '')}")
    if summary.instructions:
        out.print(f"[dim]instructions: {escape(summary.instructions)}[/]")
    for line in transcript_lines(messages):
        out.print(line)
    if questions or tasks:
        out.print("[bold]Waits on:[/]")
    for question in questions:
        for line in question_lines(question):
            out.print(f"  {line}")
    for waiting in tasks:
        out.print(f"  ... {escape(describe_call(waiting.task.tool_call))}: {escape(_task_state(waiting.task))}")
    return Exit.OK


def _message_json(message: Message) -> dict[str, Any]:
    shown: dict[str, Any] = {
        "role": message.role,
        "content": message.content,
        "tool_calls": [call_json(call) for call in message.tool_calls],
        "tool_call_id": message.tool_call_id,
    }
    steps = transcript_of(message)
    if steps:
        shown["run_transcript"] = [step.to_json() for step in steps]  # a bridged run's, as its library holds it
    return shown


def _task_state(task: Task) -> str:
    if task.status == "input_required":  # its question is answered: what it lacks is a process to carry it on
        return "answered; waits for a process to carry it on (`tarry worker`, or the command that resumes the chat)"
    return f"{task.status}" + (f": {task.status_message}" if task.status_message else "")


async def tasks(store: Store, arguments: argparse.Namespace) -> int:
    """``tarry tasks``: paused tasks that wait on work, not on a person."""
    found = await store.waiting_tasks(arguments.chat)
    if arguments.json:
        print_json([task_json(waiting) for waiting in found])
        return Exit.OK
    out = console()
    if not found:
        out.print("No task is working.")
    for waiting in found:
        out.print(
            f"[bold]{escape(describe_call(waiting.task.tool_call))}[/]  {escape(_task_state(waiting.task))}  "
            f"[dim]chat {waiting.chat_id}; since {waiting.since:%Y-%m-%d %H:%M:%S} UTC[/]"
        )
    return Exit.OK


async def cancel(store: Store, arguments: argparse.Namespace) -> int:
    """``tarry cancel``: ask whichever process carries the chat on to cancel it."""
    if not await store.cancel(arguments.chat_id):
        print(f"tarry: the cancellation of chat {arguments.chat_id} was already asked for", file=sys.stderr)
        return Exit.TOO_LATE
    print(f"Asked for chat {arguments.chat_id} to be cancelled; the process carrying it on will close its calls.")
    return Exit.OK


__all__ = [
    "answer",
    "approve",
    "cancel",
    "chats",
    "decline",
    "history",
    "pending",
    "respond",
    "run",
    "show",
    "tasks",
]
