"""Commands the bridge tests run in real OS processes: ``python -m tests.bridges.proc CMD ...``."""

from __future__ import annotations

import asyncio
import json
import sys
import time

from tarry.jobs import continue_chat
from tarry.principals import Principal
from tarry.store import Store
from tests.bridges.processes import at_the_start_line
from tests.bridges.runs import PROMPT, make_bridge


async def park(url: str) -> None:
    """Run the agent until it defers, park the run; print the chat's id."""
    bridge = make_bridge()
    async with Store(url) as store:
        result = await bridge.pydantic_agent.run(PROMPT)
        chat = await bridge.park(store, result)
        print(json.dumps({"chat": chat.id}))


async def decide(url: str, chat_id: str) -> None:
    """Approve the refund and give the lookup's result, found through ``pending_questions``."""
    async with Store(url) as store:
        waiting = {question.tool_call.name: question for question in await store.pending_questions(chat_id)}
        approved = await store.approve(waiting["refund"].id, by=Principal("ann"))
        given = await store.respond(waiting["lookup"].id, {"invoice": "INV-9"}, by=Principal("ann"))
        print(json.dumps({"approved": approved, "given": given is not None}))


async def carry(url: str, chat_id: str, start_file: str = "", lease: str = "60") -> None:
    """Carry the chat on as a worker does (after ``start_file`` appears, if given), with a claim ``lease`` of that
    many seconds; print its last message."""
    bridge = make_bridge()
    async with Store(url, lease=float(lease)) as store:
        await store.pending_questions()  # open the pool before the start signal
        if start_file:
            await at_the_start_line(start_file)
        await continue_chat(store, chat_id, [bridge.agent])
        chat = await store.load_chat(chat_id, bridge.agent.make_model(), bridge.agent.tools)
        print(json.dumps({"last": chat.messages[-1].content, "role": chat.messages[-1].role}))


async def carry_to_the_end(url: str, chat_id: str, lease: str) -> None:
    """Carry the chat on (with a claim ``lease`` of that many seconds) until its last message is the final reply,
    for up to a minute: a turn still held by a killed process is taken over once its lease ran out; print it."""
    bridge = make_bridge()
    deadline = time.monotonic() + 60
    async with Store(url, lease=float(lease)) as store:
        while True:
            await continue_chat(store, chat_id, [bridge.agent])
            chat = await store.load_chat(chat_id, bridge.agent.make_model(), bridge.agent.tools)
            last = chat.messages[-1]
            if last.role == "assistant" and not last.tool_calls:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"Chat {chat_id} was not carried to its end within a minute")
            await asyncio.sleep(0.1)  # the polling interval while the dead process's lease runs out
        print(json.dumps({"last": last.content, "roles": [message.role for message in chat.messages]}))


async def race(url: str, question_id: str, decision: str, who: str, start_file: str) -> None:
    """Once ``start_file`` appears, approve or decline the question as ``who``; print whether it was recorded."""
    async with Store(url) as store:
        await store.pending_questions()  # open the pool before the start signal
        await at_the_start_line(start_file)
        if decision == "accept":
            recorded = await store.approve(question_id, by=Principal(who))
        else:
            recorded = await store.decline(question_id, f"declined by {who}", by=Principal(who))
        print(json.dumps({"recorded": recorded, "decision": decision, "who": who}))


COMMANDS = {"park": park, "decide": decide, "carry": carry, "carry_to_the_end": carry_to_the_end, "race": race}

if __name__ == "__main__":
    asyncio.run(COMMANDS[sys.argv[1]](*sys.argv[2:]))
