"""Commands the LangGraph bridge tests run in real OS processes: ``python -m tests.bridges.graph_proc CMD ...``.

``URL`` is tarry's store; ``CHECKPOINTS`` is LangGraph's checkpointer (a SQLite file or PostgreSQL).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from tarry.jobs import continue_chat
from tarry.principals import Principal
from tarry.store import Store
from tests.bridges.graphs import make_bridge, start_run
from tests.bridges.processes import at_the_start_line


async def park(url: str, checkpoints: str, thread_id: str) -> None:
    """Run the graph until it stops at its interrupts, park the thread; print the chat's id."""
    bridge = make_bridge(checkpoints)
    async with Store(url) as store:
        await asyncio.to_thread(start_run, bridge, thread_id)
        chat = await bridge.park(store, thread_id, "Refund order A17")
        print(json.dumps({"chat": chat.id}))


async def decide(url: str, chat_id: str) -> None:
    """Approve the refund and fill in the invoice form, found through ``pending_questions``."""
    async with Store(url) as store:
        waiting = {question.tool_call.name: question for question in await store.pending_questions(chat_id)}
        approved = await store.approve(waiting["refund"].id, by=Principal("ann"))
        answered = await store.answer(waiting["invoice"].id, invoice="INV-9", by=Principal("ann"))
        print(json.dumps({"approved": approved, "answered": answered}))


async def carry(url: str, checkpoints: str, chat_id: str, start_file: str = "", lease: str = "60") -> None:
    """Carry the chat on as a worker does (after ``start_file`` appears, if given), with a claim ``lease`` of that
    many seconds; print its last message."""
    bridge = make_bridge(checkpoints)
    async with Store(url, lease=float(lease)) as store:
        await store.pending_questions()  # open the pool before the start signal
        if start_file:
            await at_the_start_line(start_file)
        await continue_chat(store, chat_id, [bridge.agent])
        chat = await store.load_chat(chat_id, bridge.agent.make_model(), bridge.agent.tools)
        print(json.dumps({"last": chat.messages[-1].content, "role": chat.messages[-1].role}))


async def resume_to_the_end(url: str, checkpoints: str, chat_id: str, lease: str) -> None:
    """Carry the chat on (a claim ``lease`` of that many seconds) until the thread ends, for up to a minute: a turn
    still held by a killed process is taken over once its lease ran out; print the last reply and the roles."""
    bridge = make_bridge(checkpoints)
    deadline = time.monotonic() + 60
    async with Store(url, lease=float(lease)) as store:
        while True:
            await continue_chat(store, chat_id, [bridge.agent])
            chat = await store.load_chat(chat_id, bridge.agent.make_model(), bridge.agent.tools)
            if chat.messages[-1].role == "assistant" and not chat.messages[-1].tool_calls:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"Chat {chat_id} was not carried to its end within a minute")
            await asyncio.sleep(0.1)  # the polling interval while the dead process's lease runs out
        print(json.dumps({"last": chat.messages[-1].content, "roles": [message.role for message in chat.messages]}))


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


COMMANDS = {"park": park, "decide": decide, "carry": carry, "resume_to_the_end": resume_to_the_end, "race": race}

if __name__ == "__main__":
    asyncio.run(COMMANDS[sys.argv[1]](*sys.argv[2:]))
