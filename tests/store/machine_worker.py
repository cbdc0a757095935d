"""A long-lived store process the state-machine test drives: ``python -m tests.store.machine_worker URL LEASE FOLDER``.

It prints ``{"id": 0, "owner": …}`` once its store is open, then reads one JSON command a line
on stdin and runs each as its own task, so commands overlap as in a web server or a worker.
Each reply is one JSON line on stdout carrying the command's id: ``{"id", "value"}``, or
``{"id", "raised", "message"}`` for a :class:`TarryError`, or ``{"id", "crashed"}`` with the
traceback for anything else. End of input lets running commands finish, then the process exits.
"""

from __future__ import annotations

import asyncio
import json
import sys
import traceback
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tarry import Message
from tarry.errors import TarryError
from tarry.store import Store
from tarry.testing import ScriptedModel
from tests.store.tools import all_tools

KINDS = ("transfer", "colour", "hang", "idem")
"""What a user message can ask for, one call each: an approval, a question, a tool that runs until
released (not idempotent), the same tool declared idempotent."""


def planned_call(kind: str, ref: str, folder: str) -> dict[str, Any]:
    """The tool call the planned model makes for ``kind``; ``ref`` makes its arguments unique."""
    if kind == "transfer":
        return {"name": "transfer_money", "arguments": {"to": ref, "amount": 1}}
    if kind == "colour":
        return {"name": "pick_colour", "arguments": {"wall": ref}}
    if kind in ("hang", "idem"):
        ready, release = hang_files(folder, ref, kind)
        return {
            "name": "hang" if kind == "hang" else "idempotent_hang",
            "arguments": {"ready": ready, "release": release},
        }
    raise ValueError(f"Unknown kind {kind!r}")


def hang_files(folder: str, ref: str, kind: str) -> tuple[str, str]:
    """The file a hanging call ``ref`` writes as it starts, and the one whose existence lets it return."""
    return f"{folder}/{ref}.{kind}.ready", f"{folder}/{ref}.release"


def planned_text(ref: str, kinds: list[str]) -> str:
    """The user message that makes the planned model call one tool per kind."""
    return f"go {ref} {','.join(kinds)}"


def planned_model(folder: str) -> ScriptedModel:
    """A model whose every turn follows from the transcript, so any process can carry a chat on.

    After a user message ``go REF KIND,KIND…`` it makes one call per kind (arguments from
    ``REF.N``); once results are in, it replies ``All done.``.
    """

    def turn(messages: list[Message]) -> Any:
        last = messages[-1]
        if last.role != "user":
            return "All done."
        _, ref, kinds = last.content.split(" ")
        return [planned_call(kind, f"{ref}.{number}", folder) for number, kind in enumerate(kinds.split(","))]

    return ScriptedModel([turn] * 20)


async def run(store: Store, folder: str, command: dict[str, Any]) -> Any:
    """Carry out one command; what it returns is the reply's ``value``."""
    op = command["op"]
    if op in ("ask", "complete", "cancel"):
        chat = await store.load_chat(command["chat"], planned_model(folder), all_tools())
        if op == "ask":
            await chat.ask(command["text"])
        elif op == "complete":
            await chat.complete()
        else:
            await chat.cancel()
        return {"waiting": chat.waiting}
    question = command["question"]
    if op == "approve":
        return await store.approve(question)
    if op == "decline":
        return await store.decline(question, command["note"])
    if op == "answer":
        return await store.answer(question, **command["values"])
    raise ValueError(f"Unknown command {op!r}")


def emit(payload: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(payload) + "\n")
    sys.stdout.flush()


async def handle(store: Store, folder: str, command: dict[str, Any]) -> None:
    reply: dict[str, Any] = {"id": command["id"]}
    try:
        reply["value"] = await run(store, folder, command)
    except TarryError as error:
        reply.update(raised=type(error).__name__, message=str(error))
    except Exception:
        reply["crashed"] = traceback.format_exc()
    emit(reply)


async def main(url: str, lease: str, folder: str) -> None:
    loop = asyncio.get_running_loop()
    # Hanging tools hold a thread each until released: more than the default pool of cpu + 4.
    loop.set_default_executor(ThreadPoolExecutor(max_workers=64))
    async with Store(url, lease=float(lease), poll_interval=0.05) as store:
        await store.pending_questions()  # connect before saying hello
        emit({"id": 0, "owner": store.owner})
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        running: set[asyncio.Task[None]] = set()
        while line := await reader.readline():
            task = asyncio.create_task(handle(store, folder, json.loads(line)))
            running.add(task)
            task.add_done_callback(running.discard)
        await asyncio.gather(*running)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
