"""Processes that race a prune (``python -m tests.store.prune_racers CMD URL IDS_FILE START_FILE``): each prints,
as JSON, what came of each thing it tried."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from tarry.errors import TarryError
from tarry.store import Store
from tests.store.tools import all_tools, reactive_model


async def _started(store: Store, start_file: str) -> None:
    await store.pending_questions()  # connected before the start signal
    while not Path(start_file).exists():
        await asyncio.sleep(0.005)


async def decide(url: str, ids_file: str, start_file: str) -> None:
    """Approve each question in ``ids_file``: "recorded", "lost", or the name of the error that refused it.

    Appends a line to ``ids_file`` + ``.progress`` after each one, for the test to start its prune in the middle.
    """
    outcomes = {}
    async with Store(url) as store:
        await _started(store, start_file)
        with Path(ids_file + ".progress").open("a") as progress:
            for question_id in json.loads(Path(ids_file).read_text()):
                try:
                    outcomes[question_id] = "recorded" if await store.approve(question_id) else "lost"
                except TarryError as error:
                    outcomes[question_id] = type(error).__name__
                progress.write(".\n")
                progress.flush()
    print(json.dumps(outcomes))


async def ask(url: str, ids_file: str, start_file: str) -> None:
    """Ask each chat in ``ids_file`` again: "replied", or the name of the error that stopped it."""
    outcomes = {}
    async with Store(url) as store:
        await _started(store, start_file)
        for chat_id in json.loads(Path(ids_file).read_text()):
            try:
                chat = await store.load_chat(chat_id, reactive_model([]), all_tools())
                await chat.ask("Once more?")
                outcomes[chat_id] = "replied"
            except TarryError as error:
                outcomes[chat_id] = type(error).__name__
    print(json.dumps(outcomes))


COMMANDS = {"decide": decide, "ask": ask}

if __name__ == "__main__":
    asyncio.run(COMMANDS[sys.argv[1]](*sys.argv[2:]))
