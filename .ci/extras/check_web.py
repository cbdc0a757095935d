"""`tarry[web]` alone: `tarry serve` answers over HTTP, and an approval sent to its API is recorded."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

from common import DEADLINE, from_the_wheel, passed, refunds

from tarry.store import Store


async def park(url: str) -> str:
    async with Store(url) as store:
        await store.setup()
        chat = await store.start_chat("Order A17 arrived broken.", agent=refunds)
        (question,) = await store.pending_questions(chat.id)
        return question.id


async def decision(url: str, question_id: str) -> str | None:
    async with Store(url) as store:
        return (await store.question(question_id)).decision


def request(url: str, token: str, method: str = "GET") -> tuple[int, str]:
    sent = urllib.request.Request(url, method=method, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(sent, timeout=DEADLINE) as response:
        return response.status, response.read().decode()


if __name__ == "__main__":
    from_the_wheel()
    url = f"sqlite:///{Path(tempfile.mkdtemp()) / 'inbox.db'}"
    question_id = asyncio.run(park(url))
    tarry = str(Path(sys.executable).with_name("tarry"))
    server = subprocess.Popen(
        [tarry, "serve", "--url", url, "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        assert server.stdout is not None
        link = ""
        while not link:  # readline returns at the latest when the server ends
            line = server.stdout.readline()
            assert line, f"tarry serve ended (status {server.wait()}) before printing its login link"
            if "/login?token=" in line:
                link = line.split()[-1]
        base, token = link.split("/login?token=")
        status, body = request(f"{base}/api/questions", token)
        assert status == 200 and [item["id"] for item in json.loads(body)] == [question_id], body
        status, body = request(f"{base}/api/questions/{question_id}/approve", token, "POST")
        assert status == 200, body
        status, page = request(f"{base}/", token)
        assert status == 200 and "<html" in page.lower(), page[:200]
    finally:
        server.terminate()
        server.wait(timeout=DEADLINE)
    assert asyncio.run(decision(url, question_id)) == "accept"
    passed("web", "`tarry serve` listed the question over HTTP, recorded its approval and served the inbox page")
