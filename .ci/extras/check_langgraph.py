"""`tarry[langgraph]` alone: a LangGraph run stopped at interrupt() (its thread in LangGraph's own SqliteSaver),
parked on SQLite, listed and approved by `tarry` commands, and resumed by a `tarry worker` process (all real
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

from common import from_the_wheel, passed, tarry_command, until

from tarry.store import Store

folder = Path(tempfile.mkdtemp())
os.environ["REFUNDS_FILE"] = str(folder / "refunds")
os.environ["CHECKPOINTS_FILE"] = str(folder / "checkpoints.db")

from graphed import agents, bridge, graph  # noqa: E402 (reads the files named above)


async def park(url: str) -> str:
    async with Store(url) as store:
        await store.setup()
        graph.invoke({"order": "A17"}, {"configurable": {"thread_id": "order-A17"}})
        chat = await bridge.park(store, "order-A17", "Refund order A17")
        return chat.id


async def last_message(url: str, chat_id: str) -> str:
    (agent,) = agents
    async with Store(url) as store:
        chat = await store.load_chat(chat_id, agent.make_model(), agent.tools)
        return chat.messages[-1].content


if __name__ == "__main__":
    from_the_wheel()
    refunds = Path(os.environ["REFUNDS_FILE"])
    url = f"sqlite:///{folder / 'tarry.db'}"
    chat_id = asyncio.run(park(url))
    listed = json.loads(tarry_command("pending", "--json", "--url", url).stdout)
    assert [item["tool_call"]["name"] for item in listed] == ["refund"], listed
    assert listed[0]["tool_call"]["arguments"] == {"refund": "A17"}, listed
    tarry_command("approve", listed[0]["id"], "--url", url)
    assert not refunds.exists(), "approving ran the node"
    worker = subprocess.Popen(
        [str(Path(sys.executable).with_name("tarry")), "worker", "--agents", "graphed:agents", "--url", url],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        until(lambda: asyncio.run(last_message(url, chat_id)) == "refunded A17", "the worker to resume the run")
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.communicate(timeout=60)
    assert refunds.read_text().splitlines() == ["A17"], refunds.read_text()
    passed("langgraph", "a run parked at interrupt(), approved by `tarry` commands, resumed by `tarry worker`")
