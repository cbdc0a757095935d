"""``tarry worker --agents module:name`` finds the module in the working directory, as ``celery -A`` does."""

from __future__ import annotations

import asyncio
import shutil
import signal
import subprocess
from pathlib import Path

from tarry.store import Store
from tests.cli.chat_agent import agent
from tests.cli.conftest import HERE, tarry_command, user_environment


async def test_the_worker_imports_agents_from_the_working_directory(tmp_path: Path) -> None:
    shutil.copy(HERE / "chat_agent.py", tmp_path / "errands.py")
    url = f"sqlite:///{tmp_path / 'tarry.db'}"
    async with Store(url) as store:
        await store.setup()
        chat = await store.create_chat(agent=agent)  # the same agent name as errands:agent
        await chat.ask("render the video")
        assert chat.waiting
    worker = await asyncio.to_thread(
        lambda: subprocess.Popen(
            [tarry_command(), "worker", "--agents", "errands:agent", "--url", url],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=user_environment(),  # no PYTHONPATH: the working directory must be found all the same
        )
    )
    try:
        assert worker.stdout is not None
        first = await asyncio.wait_for(asyncio.to_thread(worker.stdout.readline), 60)
        assert first.startswith("tarry worker: carrying on chats of cli-test"), first
        async with Store(url) as store, asyncio.timeout(60):
            while True:
                done = await store.load_chat(chat.id, agent.make_model(), agent.tools)
                if not done.waiting and done.messages[-1].role == "assistant":
                    break
                await asyncio.sleep(0.1)
        assert done.messages[-1].content == "Done: holiday.mp4 is ready."
    finally:
        worker.send_signal(signal.SIGTERM)
        out, err = await asyncio.to_thread(worker.communicate, timeout=60)
    assert worker.returncode == 0, err
    assert "ModuleNotFoundError" not in err
    assert "tarry worker: stopped after" in out
