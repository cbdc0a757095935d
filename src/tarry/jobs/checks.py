"""Batched task checks: how a worker checks the working tasks of many due chats without a full chat step each.

Most due chats wait on working tasks and nothing else: checking them is calling each task's ``resume`` and, mostly,
saving that it still works. For those chats the worker claims the calls in one statement, runs their checks a
bounded number at once, and saves every "still working" (with each chat's next check) in one transaction. A check
that changes something (a result, a question, an error) is saved as a chat step saves it, and its chat is made due
at once for a full step ([`continue_chat`][tarry.jobs.continue_chat]), which asks the model. Any other due chat goes
to a full step directly.

A failure is kept to its chat: a chat whose save fails has its claims given back and is made due again, and a full
step (for a check that asked a question as it ran) runs beside the saves of the other chats, its failure logged.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from tarry.agents import Agent
from tarry.calls import Outcome
from tarry.carrying import run_outcome
from tarry.clock import utcnow
from tarry.errors import (
    ClaimLostError,
    InvalidArgumentsError,
    StoreConflictError,
    StoreFullError,
    StoreReadOnlyError,
    StoreUnavailableError,
)
from tarry.jobs.carry import continue_chat
from tarry.live import LiveCall, current_call
from tarry.messages import ToolCall
from tarry.questions import Question
from tarry.store import Store
from tarry.store.due import ChatSchedule, give_back, pick_due
from tarry.store.task_checks import (
    HeldCheck,
    claim_checks,
    release_chats,
    release_checks,
    renew_checks,
    save_changed,
    save_still_working,
)
from tarry.tasks import Task
from tarry.tools import Tool, call_maybe_async
from tarry.toolsets import split_tools
from tarry.tracing import mark, span, span_ids

logger = logging.getLogger("tarry.jobs")
_DATABASE_AWAY = (StoreUnavailableError, StoreConflictError, StoreReadOnlyError, StoreFullError)
"""What a save raises once the database stayed away through its retries: no chat's fault."""
SAVE_EVERY = 0.05
"""Seconds between two saves of a batch's finished checks while others still run."""


class _AskedWhileChecked(ClaimLostError):
    """A task's ``resume`` asked a question while it ran (``current_call``): only a full step can record it.

    A ``ClaimLostError``, so that ``run_outcome`` raises it through instead of making it the call's error result."""


async def _refuse_ask(question: Question) -> Question:
    raise _AskedWhileChecked(question.message)


@dataclass
class _Check:
    """One claimed call, ready to check: its tool, its task and the arguments its ``resume`` takes."""

    held: HeldCheck
    tool: Tool
    task: Task
    arguments: dict[str, Any]
    outcome: Outcome | None = field(default=None)
    """What the check came to; ``None`` until it ran, and when its ``resume`` asked a person something."""
    finished: datetime | None = None
    """When the check finished: its task's next check is a ``poll_interval`` after that."""

    @property
    def working(self) -> Task | None:
        """The task, when the check found it working on and asking nothing new; else ``None``."""
        outcome = self.outcome
        return outcome.task if outcome is not None and not outcome.questions else None


@dataclass
class Batch:
    """The due chats one worker picked, split into the task checks it claimed and the chats for a full step."""

    picked: Mapping[str, ChatSchedule]
    checks: list[_Check]
    full_steps: set[str]
    """The picked chats that need a full step now (continue_chat): they have other work, a cancellation requested,
    or a task a tool cannot check here."""
    checking: set[str] = field(default_factory=set)
    """The chats whose checks are still under way: ``run_batch`` drops each once its checks are saved (and its
    full step, if a check asked for one, is over), so a worker may take it again."""


async def take_due(
    store: Store, agents: Mapping[str, Agent], skip: Collection[str], limit: int, *, batching: bool
) -> Batch:
    """Take up to ``limit`` due chats of ``agents`` but ``skip`` ([`pick_due`][tarry.store.due.pick_due]) and split
    them: with ``batching``, the calls of those that only wait on working tasks are claimed for a batch of checks
    ([`claim_batch`][tarry.jobs.checks.claim_batch]); every other chat taken is in ``full_steps``."""
    picked = await pick_due(store, agents, skip, limit)
    if batching and picked:
        return await claim_batch(store, agents, picked)
    return Batch(picked, [], set(picked))


async def claim_batch(store: Store, agents: Mapping[str, Agent], picked: Mapping[str, ChatSchedule]) -> Batch:
    """Claim the calls of those ``picked`` chats that only wait on working tasks (one statement), and give back
    those of chats whose tasks cannot be checked here; the rest of ``picked`` needs a full step.

    If this fails, every claim it took on the calls of ``picked`` is given back and ``picked`` is made due again
    (as far as the database lets), then the error is raised."""
    candidates = [chat_id for chat_id, schedule in picked.items() if schedule.cancel_requested_at is None]
    try:
        held = await claim_checks(store, candidates)
        checks, unchecked = _prepare(held, agents, picked)
        await release_checks(store, [check.row_id for check in unchecked])
    except Exception:
        await _undo_pick(store, picked)
        raise
    chats = {check.held.chat_id for check in checks}
    return Batch(picked, checks, set(picked) - chats, chats)


async def _undo_pick(store: Store, picked: Mapping[str, ChatSchedule]) -> None:
    """Give back this process's claims on the calls of ``picked`` and make those chats due now again."""
    try:
        await release_chats(store, picked)
        await give_back(store, {chat_id: schedule.version for chat_id, schedule in picked.items()})
    except Exception:
        logger.exception("Giving back %d picked chat(s) failed; they fall due again after the lease", len(picked))


async def run_batch(
    store: Store,
    agents: Mapping[str, Agent],
    batch: Batch,
    limit: asyncio.Semaphore,
    default_poll_interval: float,
    *,
    on_leave: Callable[[], None] | None = None,
) -> None:
    """Check the tasks of ``batch``, ``limit`` at once, and save what they came to: every "still working" and its
    chat's next check in one transaction, each change as a chat step saves it. A chat whose check asked a person
    something as it ran is given a full step (``continue_chat``), which runs that check again, beside the saves.

    The saves go in waves, every ``SAVE_EVERY`` seconds, of the chats whose checks all finished meanwhile, so a slow
    check holds back only its own chat; the claims are renewed meanwhile, as a chat step renews the claim it holds.
    Each chat leaves ``batch.checking`` once it is saved (then ``on_leave`` is called, to wake a worker that may
    take it again). A failure is kept to its chat: one whose save fails has its claims given back and is made due
    again; one whose full step fails is logged, as a worker logs a step's failure.
    """

    async def run(check: _Check) -> None:
        async with limit:
            check.outcome = await _outcome(check)
            check.finished = utcnow()

    async def step(chat_id: str) -> None:
        try:
            schedule = batch.picked[chat_id]
            await continue_chat(store, chat_id, agents, default_poll_interval=default_poll_interval, schedule=schedule)
        except Exception:
            logger.exception("Carrying chat %s on failed; it falls due again after the lease", chat_id)
        finally:
            leave({chat_id})

    def leave(chat_ids: set[str]) -> None:
        batch.checking -= chat_ids
        if chat_ids and on_leave is not None:
            on_leave()

    by_chat: dict[str, list[_Check]] = {}
    for check in batch.checks:
        by_chat.setdefault(check.held.chat_id, []).append(check)
    pending = {asyncio.ensure_future(asyncio.gather(*map(run, checks))): checks for checks in by_chat.values()}
    renewal = asyncio.create_task(_renew(store, [check.held.row_id for check in batch.checks]))
    steps: list[asyncio.Task[None]] = []
    try:
        while pending:
            done, _ = await asyncio.wait(pending, timeout=SAVE_EVERY)
            finished = [check for running in done for check in pending.pop(running)]
            if finished:
                asked = await _save_wave(store, finished, batch.picked, default_poll_interval)
                leave({check.held.chat_id for check in finished} - asked)
                steps += [asyncio.create_task(step(chat_id)) for chat_id in sorted(asked)]
        renewal.cancel()
        await asyncio.gather(*steps)
    finally:
        renewal.cancel()
        for running in pending:
            running.cancel()
        for started in steps:
            started.cancel()
    working = sum(check.working is not None for check in batch.checks)
    logger.info("Checked %d task(s) of %d chat(s) in a batch: %d still work", len(batch.checks), len(by_chat), working)


async def _renew(store: Store, row_ids: list[int]) -> None:
    """Push this process's claims on ``row_ids`` a lease ahead every third of a lease, for as long as it runs."""
    while True:
        await asyncio.sleep(store.lease / 3)
        try:
            await renew_checks(store, row_ids)
        except Exception:
            logger.exception("Renewing the claims of a batch of checks failed; they run out if this goes on")


def _prepare(
    held: list[HeldCheck], agents: Mapping[str, Agent], picked: Mapping[str, ChatSchedule]
) -> tuple[list[_Check], list[HeldCheck]]:
    """The checks to run, and the claimed calls of chats that need a full step instead (to give back)."""
    by_chat: dict[str, list[HeldCheck]] = {}
    for check in held:
        by_chat.setdefault(check.chat_id, []).append(check)
    # An MCP server's tools (a tool source's) are left to a full step: the chat's own login may be needed for them.
    tools = {name: split_tools(agent.tools)[1] for name, agent in agents.items()}
    now = utcnow()
    ready: list[_Check] = []
    unchecked: list[HeldCheck] = []
    for chat_id, calls in by_chat.items():
        known = tools.get(picked[chat_id].agent or "", {})
        prepared = [_ready(known.get(check.name), check, now) for check in calls]
        if all(check is not None for check in prepared):
            ready.extend(check for check in prepared if check is not None)
        else:
            unchecked.extend(calls)
    return ready, unchecked


def _ready(tool: Tool | None, held: HeldCheck, now: datetime) -> _Check | None:
    """``held`` ready to check with ``tool``, or ``None`` when a full step should carry it on: its tool is gone or
    does not check in batches, its task does not simply work, or it expired."""
    if tool is None or not tool.checks_in_batches:
        return None
    call = ToolCall(held.call_id, held.name, held.arguments)
    try:
        task = tool.load_task(held.state, tool_call=call)
    except Exception:
        logger.exception("Could not load the task of the %s call %s", held.name, held.call_id)
        return None
    expires = task.expires_at
    if task.status != "working" or task.questions or (expires is not None and expires <= now):
        return None
    try:
        arguments = tool.validate(held.arguments)
    except InvalidArgumentsError:
        return None  # the full step closes it with the error the model reads
    return _Check(held, tool, task, arguments)


async def _outcome(check: _Check) -> Outcome | None:
    """What checking the task came to; ``None`` when its ``resume`` asked a question as it ran. Traced as a full
    step's ``resume`` is: an ``execute_tool`` span, and a ``pause`` mark when the call goes on waiting."""
    call = check.task.tool_call
    assert call is not None
    ids = span_ids({"chat_id": check.held.chat_id, "call_id": call.id})
    attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": call.name, **ids}
    live = current_call.set(LiveCall(call, check.held.chat_id, _refuse_ask))
    try:
        with span(f"execute_tool {call.name}", {**attributes, "gen_ai.tool.call.id": call.id}):
            running = call_maybe_async(check.tool.resume, check.task, **check.arguments)
            outcome = await run_outcome(call, check.held.chat_id, running)
    except _AskedWhileChecked:
        return None
    finally:
        current_call.reset(live)
    task = outcome.task
    if task is not None:
        paused = {
            "tarry.pause.reason": "question" if task.questions else "task",
            "tarry.task.status": str(task.status),
            "tarry.questions": len(outcome.questions),
        }
        mark(f"pause {call.name}", {"gen_ai.tool.name": call.name, **ids, **paused})
    return outcome


async def _save_wave(
    store: Store, checks: list[_Check], picked: Mapping[str, ChatSchedule], default_poll_interval: float
) -> set[str]:
    """``_save`` the checks of a wave, all together; if that fails, each chat's alone, so that a chat whose save
    fails has its claims given back and is made due again while the others' checks are saved. Returns the chats
    that need a full step. A database that stayed away through a save's retries is not tried again chat by chat
    (each would wait as long): every chat left is given back."""
    by_chat: dict[str, list[_Check]] = {}
    for check in checks:
        by_chat.setdefault(check.held.chat_id, []).append(check)
    try:
        return await _save(store, checks, picked, default_poll_interval)
    except _DATABASE_AWAY:
        logger.exception("Saving %d batched task check(s) failed; their chats fall due again", len(checks))
        await _undo_pick(store, {chat_id: picked[chat_id] for chat_id in by_chat})
        return set()
    except Exception:
        logger.exception("Saving %d batched task check(s) together failed; saving them chat by chat", len(checks))
    asked: set[str] = set()
    left = dict(by_chat)
    for chat_id, own in by_chat.items():
        del left[chat_id]
        try:
            asked |= await _save(store, own, picked, default_poll_interval)
        except Exception as error:
            logger.exception("Saving the task checks of chat %s failed; it falls due again", chat_id)
            given = [chat_id, *left] if isinstance(error, _DATABASE_AWAY) else [chat_id]
            await _undo_pick(store, {chat: picked[chat] for chat in given})
            if isinstance(error, _DATABASE_AWAY):
                break
    return asked


async def _save(
    store: Store, checks: list[_Check], picked: Mapping[str, ChatSchedule], default_poll_interval: float
) -> set[str]:
    """Save the checks: the "still working" ones and their chats' next checks in one transaction, then each
    change as a chat step saves it (its chat due now). A resume that asked a question gives its call back
    unchanged; returns the ids of those chats, which need a full step that runs it again and records the
    question."""
    now = utcnow()
    states: list[tuple[int, dict[str, Any]]] = []
    next_at: dict[str, datetime] = {}
    for check in checks:
        task = check.working
        if task is not None:
            states.append((check.held.row_id, task.to_dict()))
            at = _next_check(task, check.finished or now, default_poll_interval)
            next_at[check.held.chat_id] = min(at, next_at.get(check.held.chat_id, at))
    asked = [check for check in checks if check.outcome is None]
    changed = [check for check in checks if check.outcome is not None and check.working is None]
    await _give_back(store, asked)
    for chat_id in {check.held.chat_id for check in [*changed, *asked]}:
        next_at.pop(chat_id, None)  # a change makes it due now, for a full step; an ask has one at once
    next_checks = [(chat_id, picked[chat_id].version, at) for chat_id, at in next_at.items()]
    saved = await save_still_working(store, states, next_checks)
    if saved < len(states):
        logger.warning("%d task check(s) lost their claim to another process; it saves them", len(states) - saved)
    await _save_changes(store, changed, now)
    return {check.held.chat_id for check in asked}


async def _give_back(store: Store, asked: list[_Check]) -> None:
    """Give back, unchanged, the calls whose ``resume`` asked a person something as it ran."""
    await release_checks(store, [check.held.row_id for check in asked])
    for check in asked:
        logger.warning(
            "The %s call's resume asked a question as a batched check ran it; a full step runs it again",
            check.held.name,
        )


async def _save_changes(store: Store, changed: list[_Check], now: datetime) -> None:
    """Save each check that changed its call as a chat step saves it, its chat due ``now``."""
    for check in changed:
        assert check.outcome is not None
        if not await save_changed(store, check.held, check.outcome, now):
            logger.warning("Lost the claim on the %s call %s; another process carries it on", *_names(check))


def _next_check(task: Task, now: datetime, default_poll_interval: float) -> datetime:
    interval = task.poll_interval if task.poll_interval is not None else default_poll_interval
    at = now + timedelta(seconds=interval)
    expires = task.expires_at
    return at if expires is None else min(at, expires)


def _names(check: _Check) -> tuple[str, str]:
    return check.held.name, check.held.call_id
