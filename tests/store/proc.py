"""Commands the cross-process store tests run in real OS processes: ``python -m tests.store.proc CMD ...``."""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
from pathlib import Path
from typing import cast

from tarry.errors import PendingToolCallsError
from tarry.store import Store
from tarry.store.engine import Durability
from tests.store.tools import all_tools, reactive_model

TRANSFER = [{"name": "transfer_money", "arguments": {"to": "Bob", "amount": 5}}]
DURABILITY = cast(Durability, os.environ.get("TARRY_TEST_DURABILITY", "full"))
"""The store's durability in these processes: "fast" runs SQLite's uncontended transactions on the event loop."""


async def decide(url: str, ids_file: str, seed: str, start_file: str) -> None:
    """Approve or decline (at random) every question in ``ids_file``, in a random order; print what returned True."""
    ids = json.loads(Path(ids_file).read_text())
    chance = random.Random(int(seed))
    chance.shuffle(ids)
    won = {}
    async with Store(url, durability=DURABILITY) as store:
        await store.pending_questions()  # open the pool before the start signal
        while not Path(start_file).exists():
            await asyncio.sleep(0.01)
        for question_id in ids:
            if chance.random() < 0.5:
                decision, recorded = "accept", await store.approve(question_id)
            else:
                decision, recorded = "decline", await store.decline(question_id, f"declined by {seed}")
            if recorded:
                won[question_id] = decision
    print(json.dumps(won))


async def carry(url: str, *chat_ids: str) -> None:
    """Load each chat and complete it."""
    async with Store(url, lease=2, durability=DURABILITY) as store:
        for chat_id in chat_ids:
            chat = await store.load_chat(chat_id, reactive_model(TRANSFER), all_tools())
            await chat.complete()


async def run(url: str, chat_id: str, lease: str, calls: str, text: str = "") -> None:
    """Load one chat and ask ``text`` (or complete it); a call of it may hang until this process is killed."""
    async with Store(url, lease=float(lease)) as store:
        chat = await store.load_chat(chat_id, reactive_model(json.loads(calls)), all_tools())
        reply = await (chat.ask(text) if text else chat.complete())
        print(json.dumps({"reply": None if reply is None else reply.content, "waiting": chat.waiting}))


async def race(url: str, chat_id: str, start_file: str, calls: str, text: str = "") -> None:
    """Wait for the start signal, then ask ``text`` or complete the chat (several of these run at once)."""
    async with Store(url, durability=DURABILITY) as store:
        chat = await store.load_chat(chat_id, reactive_model(json.loads(calls)), all_tools())
        while not Path(start_file).exists():
            await asyncio.sleep(0.005)
        try:
            reply = await (chat.ask(text) if text else chat.complete())
        except PendingToolCallsError:
            reply = None  # the other racer's ask came first and its calls wait
        print(json.dumps({"reply": None if reply is None else reply.content}))


async def grant(url: str, tool: str, by: str, within: str = "") -> None:
    """Make a standing grant of ``tool`` as ``by`` (``within``: ``name=min..max``); print its id."""
    bounds = {}
    if within:
        name, _, span = within.partition("=")
        low, _, high = span.partition("..")
        bounds[name] = (float(low), float(high))
    async with Store(url) as store:
        made = await store.grant(tool, by=by, within=bounds)
    print(made.id)


async def approve_with(url: str, question_id: str, amount: str, start_file: str) -> None:
    """Wait for the start signal, then approve the question with its amount changed to ``amount``; print whether
    this process recorded the decision."""
    async with Store(url, durability=DURABILITY) as store:
        await store.pending_questions()  # open the pool before the start signal
        while not Path(start_file).exists():
            await asyncio.sleep(0.005)
        recorded = await store.approve(question_id, arguments={"amount": int(amount)}, by=f"p{amount}")
        print(json.dumps({"recorded": recorded}))


COMMANDS = {
    "decide": decide,
    "carry": carry,
    "run": run,
    "race": race,
    "grant": grant,
    "approve_with": approve_with,
}

if __name__ == "__main__":
    asyncio.run(COMMANDS[sys.argv[1]](*sys.argv[2:]))
