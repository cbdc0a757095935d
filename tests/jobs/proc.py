"""Commands the jobs tests run in real OS processes: ``python -m tests.jobs.proc CMD ...``."""

from __future__ import annotations

import asyncio
import json
import random
import sys
from pathlib import Path

from tarry.store import Store


async def answer(url: str, expected: str, seed: str, max_delay: str, celery_broker: str = "") -> None:
    """Approve and answer questions as they appear, in random order at random times, until ``expected`` are done.

    Prints what it recorded: one ``{"order", "kind", "value"}`` per question. With ``celery_broker``,
    each decision also enqueues the chat's ``tarry.continue_chat`` task (the store's decision hook).
    """
    chance = random.Random(int(seed))
    done: dict[str, dict[str, str]] = {}
    async with Store(url) as store:
        if celery_broker:
            from tarry.jobs.celery import enqueue_on_decisions
            from tests.jobs.celery_app import make_app

            enqueue_on_decisions(store, make_app(celery_broker, url))
        while len(done) < int(expected):
            pending = [question for question in await store.pending_questions() if question.id not in done]
            chance.shuffle(pending)
            for question in pending[:20]:
                await asyncio.sleep(chance.uniform(0, float(max_delay)))
                order = str(question.tool_call.arguments.get("order") or question.tool_call.arguments["to"])
                if question.kind == "approval":
                    recorded, value = await store.approve(question.id), "approved"
                else:
                    value = chance.choice(["S", "M", "L"])
                    recorded = await store.answer(question.id, value)
                assert recorded, f"question {question.id} was decided by someone else"
                done[question.id] = {"order": order, "kind": question.kind, "value": value}
            if not pending:
                await asyncio.sleep(0.05)
    print(json.dumps(list(done.values())))


async def cancel(url: str, chat_id: str, ready: str) -> None:
    """Wait for ``ready`` to exist, then request the chat's cancellation."""
    while not Path(ready).exists():
        await asyncio.sleep(0.01)
    async with Store(url) as store:
        print(json.dumps(await store.cancel(chat_id)))


COMMANDS = {"answer": answer, "cancel": cancel}

if __name__ == "__main__":
    asyncio.run(COMMANDS[sys.argv[1]](*sys.argv[2:]))
