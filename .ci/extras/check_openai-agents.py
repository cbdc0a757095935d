"""`tarry[openai-agents]` alone: an Agents SDK run stopped on two tool approvals, parked on SQLite with its
RunState, listed and decided by `tarry` commands, and carried on by a `tarry worker` process (all real
processes)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from agents import Runner
from common import from_the_wheel, passed, tarry_command, until
from sdk_bridged import FINAL, agent, bridge

from tarry.store import Store


async def park(url: str) -> str:
    async with Store(url) as store:
        await store.setup()
        result = await Runner.run(agent, "Refund order A17, then wire the money to B")
        chat = await bridge.park(store, result)
        return chat.id


async def last_message(url: str, chat_id: str) -> str:
    async with Store(url) as store:
        chat = await store.load_chat(chat_id, bridge.agent.make_model(), bridge.agent.tools)
        return chat.messages[-1].content


if __name__ == "__main__":
    from_the_wheel()
    folder = Path(tempfile.mkdtemp())
    refunds = folder / "refunds"
    os.environ["REFUNDS_FILE"] = str(refunds)
    url = f"sqlite:///{folder / 'tarry.db'}"
    chat_id = asyncio.run(park(url))
    listed = json.loads(tarry_command("pending", "--json", "--url", url).stdout)
    waiting = {item["tool_call"]["name"]: item["id"] for item in listed}
    assert sorted(waiting) == ["refund", "wire"], waiting
    tarry_command("approve", waiting["refund"], "--url", url)
    tarry_command("decline", waiting["wire"], "--note", "Account B is closed", "--url", url)
    assert not refunds.exists(), "deciding ran the tool"
    worker = subprocess.Popen(
        [str(Path(sys.executable).with_name("tarry")), "worker", "--agents", "sdk_bridged:agents", "--url", url],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        until(lambda: asyncio.run(last_message(url, chat_id)) == FINAL, "the worker to carry the run on")
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.communicate(timeout=60)
    assert refunds.read_text().splitlines() == ["A17"], refunds.read_text()
    passed("openai-agents", "a run parked with its RunState, decided by `tarry` commands, carried on by `tarry worker`")
