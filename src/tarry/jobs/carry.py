"""``continue_chat``: carry one stored chat on, and say when it next needs a look."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Mapping, MutableMapping
from datetime import datetime, timedelta

from tarry.agents import Agent
from tarry.calls import CallRecord
from tarry.chat import Chat
from tarry.clock import utcnow
from tarry.store import Store
from tarry.store.due import ChatSchedule, cancel_requested, read_schedule, write_next_check
from tarry.store.schedule import DEFAULT_POLL_INTERVAL

logger = logging.getLogger("tarry.jobs")
CANCEL_CHECK = 0.5
"""Seconds between two looks for a cancellation request while a step runs."""
RETRY = 1.0
"""Seconds until another look at a chat that could go on but another process holds."""

Agents = Iterable[Agent] | Mapping[str, Agent]


def agents_by_name(agents: Agents) -> dict[str, Agent]:
    """The agents by name; two agents with one name raise ``ValueError``."""
    if isinstance(agents, Mapping):
        return dict(agents)
    if isinstance(agents, Agent):
        raise TypeError("agents must be a list of agents, not a single agent")
    found: dict[str, Agent] = {}
    for agent in agents:
        if not isinstance(agent, Agent):
            raise TypeError(f"agents must be Agent objects, got {agent!r}")
        if agent.name in found:
            raise ValueError(f"Two agents are named {agent.name!r}")
        found[agent.name] = agent
    return found


async def continue_chat(
    store: Store,
    chat_id: str,
    agents: Agents,
    *,
    default_poll_interval: float = DEFAULT_POLL_INTERVAL,
    cache: MutableMapping[str, Chat] | None = None,
    schedule: ChatSchedule | None = None,
) -> datetime | None:
    """Carry the stored chat on as far as it can go now; return when it next needs a look, or ``None``.

    The chat is rebuilt from the agent whose name it recorded (one of ``agents``); a chat of an
    agent not given here is left untouched (and logged). Anything that can progress does: calls
    with a new decision run, paused tasks are checked, lapsed questions and expired tasks are
    closed, calls whose process died are recovered, and the model is asked once results are in.
    The returned time is the earliest task check (its ``poll_interval``, else
    ``default_poll_interval``) or expiry. Safe to call from several processes at once, and as
    often as you like: claims on calls and on the chat keep each step to one process.

    A cancellation requested with ``store.cancel()`` is honoured here: before the step, or
    within ``CANCEL_CHECK`` seconds while it runs.

    ``cache`` keeps chat objects between calls (the [`Worker`][tarry.jobs.Worker] passes one): a chat found
    there is brought up to date with one cheap query instead of being loaded again.
    ``schedule`` is the chat's schedule when the caller just read it (a worker picking it).
    """
    known = agents_by_name(agents)
    if schedule is None:
        schedule = await read_schedule(store, chat_id)
    if schedule is None:
        logger.warning("No chat has the id %s; nothing to carry on", chat_id)
        return None
    agent = known.get(schedule.agent or "")
    if agent is None:
        logger.warning(
            "Chat %s belongs to agent %r, which this worker does not serve; left as it is", chat_id, schedule.agent
        )
        return None
    chat = cache.pop(chat_id, None) if cache is not None else None
    if chat is None:
        chat = await store.load_chat(chat_id, agent.make_model(), agent.tools)
    if schedule.cancel_requested_at is not None or not await _step(store, chat):
        await chat.cancel()
        await write_next_check(store, chat_id, schedule.version, {}, turn_due=False, retry_at=utcnow())
        return None
    next_check = await schedule_next_check(store, chat, default_poll_interval, schedule.version)
    logger.info(
        "Carried chat %s on: %s; next check %s",
        chat_id,
        "waits" if chat.waiting else "done",
        next_check.isoformat() if next_check is not None else "none",
        extra={"chat_id": chat_id},
    )
    if cache is not None and next_check is not None:
        cache[chat_id] = chat  # only after a step that went well: a failed one loads afresh next time
    return next_check


async def _step(store: Store, chat: Chat) -> bool:
    """Complete the chat, watching for a cancellation request; ``False`` when one came and the step was stopped."""
    step = asyncio.ensure_future(chat.complete())
    while True:
        done, _ = await asyncio.wait({step}, timeout=CANCEL_CHECK)
        if done:
            step.result()
            return True
        if await cancel_requested(store, chat.id):
            step.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await step
            logger.info(
                "Chat %s: a cancellation was requested; its step was stopped", chat.id, extra={"chat_id": chat.id}
            )
            return False


async def schedule_next_check(
    store: Store, chat: Chat, default_poll_interval: float, seen_version: int
) -> datetime | None:
    """Work out when the chat next needs a look and write it (unless a newer wake came), in one transaction.

    The time is the earliest of: each open call's question or task expiry, a working task's
    ``poll_interval`` (else ``default_poll_interval``), a retry for a call that could run but
    did not, and, for a call or model turn another process holds, when its lease runs out.
    ``None`` when nothing is pending.
    """
    now = utcnow()
    if_free = {
        record.call.id: _call_checks(record, now, default_poll_interval)
        for record in chat.records.values()
        if record.open
    }
    # The chat's own question (a login) that lapses makes it due then, to ask for a new one.
    if_free[""] = [
        question.expires_at
        for question in chat.chat_questions
        if question.decision is None and question.expires_at is not None and question.expires_at > now
    ]
    retry_at = now + timedelta(seconds=RETRY)
    return await write_next_check(store, chat.id, seen_version, if_free, turn_due=_turn_due(chat), retry_at=retry_at)


def _call_checks(record: CallRecord, now: datetime, default_poll_interval: float) -> list[datetime]:
    """When an open call next needs a look: its questions' and task's expiries, its task's poll, or a retry."""
    waiting = record.pending_questions(now)
    checks = [question.expires_at for question in waiting if question.expires_at is not None]
    task = record.task
    if task is not None and task.expires_at is not None:
        checks.append(task.expires_at)
    if task is not None and not task.waits_on_person():
        interval = task.poll_interval if task.poll_interval is not None else default_poll_interval
        checks.append(now + timedelta(seconds=interval))
    elif not waiting and task is None:  # could run, but did not here: decided meanwhile, or a claim was lost
        checks.append(now + timedelta(seconds=RETRY))
    return checks


def _turn_due(chat: Chat) -> bool:
    """Whether the model owes the chat a turn: it neither waits nor is stopped, and the model did not speak last."""
    return not chat.waiting and not chat.stopped and bool(chat.messages) and chat.messages[-1].role != "assistant"
