"""Commands the Agents SDK bridge tests run in real OS processes: ``python -m tests.bridges.sdk_proc CMD ...``.

Each answers the Responses API with respx, as the tests' own process does (``openai_api``).
"""

from __future__ import annotations

import asyncio
import json
import sys

from agents import Runner

from tarry.jobs import continue_chat
from tarry.principals import Principal
from tarry.store import Store
from tests.bridges.proc import race
from tests.bridges.processes import at_the_start_line
from tests.bridges.sdk_runs import PROMPT, make_bridge, openai_api


async def park(url: str) -> None:
    """Run the agent until it stops on its approvals, park the run; print the chat's id."""
    bridge = make_bridge()
    async with Store(url) as store:
        result = await Runner.run(bridge.sdk_agent, PROMPT)
        chat = await bridge.park(store, result)
        print(json.dumps({"chat": chat.id}))


async def decide(url: str, chat_id: str) -> None:
    """Approve the refund and decline the lookup with a note, found through ``pending_questions``."""
    async with Store(url) as store:
        waiting = {question.tool_call.name: question for question in await store.pending_questions(chat_id)}
        approved = await store.approve(waiting["refund"].id, by=Principal("ann"))
        declined = await store.decline(waiting["lookup"].id, "Look it up yourself", by=Principal("ann"))
        print(json.dumps({"approved": approved, "declined": declined}))


async def carry(url: str, chat_id: str, start_file: str = "") -> None:
    """Carry the chat on as a worker does (after ``start_file`` appears, if given); print its last message."""
    bridge = make_bridge()
    async with Store(url) as store:
        await store.pending_questions()  # open the pool before the start signal
        if start_file:
            await at_the_start_line(start_file)
        await continue_chat(store, chat_id, [bridge.agent])
        chat = await store.load_chat(chat_id, bridge.agent.make_model(), bridge.agent.tools)
        print(json.dumps({"last": chat.messages[-1].content, "role": chat.messages[-1].role}))


COMMANDS = {"park": park, "decide": decide, "carry": carry, "race": race}

if __name__ == "__main__":
    with openai_api():
        asyncio.run(COMMANDS[sys.argv[1]](*sys.argv[2:]))
