"""docs/notifications-slack.md's example runs whole: its app serves, Slack's signed click on its posted message
decides the question through the Slack endpoint, and the message is updated."""

from __future__ import annotations

import ast
import asyncio
import inspect
import socket
from pathlib import Path

import httpx
import pytest
import uvicorn

from tests.slack.fake_slack import BOT_TOKEN, FakeSlack
from tests.slack.signing import SIGNING_SECRET, click, signed
from tests.slack.waiting import until
from tests.test_docs import python_blocks

PAGE = Path(__file__).resolve().parents[2] / "docs" / "notifications-slack.md"


async def test_the_slack_page_runs_and_its_app_decides_a_signed_click(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slack_api: FakeSlack
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SLACK_BOT_TOKEN", BOT_TOKEN)
    monkeypatch.setenv("SLACK_SIGNING_SECRET", SIGNING_SECRET)
    monkeypatch.setenv("SLACK_API_URL", slack_api.base_url)
    namespace: dict[str, object] = {"__name__": "docs_notifications_slack"}
    blocks = python_blocks(PAGE)
    assert len(blocks) == 2
    for line, code in blocks:
        compiled = compile("\n" * (line - 1) + code, str(PAGE), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        result = eval(compiled, namespace)
        if inspect.iscoroutine(result):
            await result
    store, question, message = namespace["store"], namespace["question"], namespace["message"]
    (posted,) = slack_api.of("chat.postMessage")
    assert posted["channel"] == "U0ADA" and (message.channel, message.ts) == ("D0ADA", "1764880000.000001")  # type: ignore[attr-defined]

    listening = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listening.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(namespace["app"], log_level="warning", lifespan="off"))  # type: ignore[arg-type]
    serving = asyncio.create_task(server.serve(sockets=[listening]))
    try:
        await until(lambda: server.started, "the example's app to start")
        url = f"http://127.0.0.1:{listening.getsockname()[1]}/slack/interactions"
        payload = click("tarry_approve", question.id, user="U0ADA", channel="D0ADA", ts=message.ts)  # type: ignore[attr-defined]
        async with httpx.AsyncClient() as http:
            answered = await http.post(url, **signed(payload))
        assert answered.status_code == 200
        decided = await store.question(question.id)  # type: ignore[attr-defined]
        assert (decided.decision, decided.decided_by.name, decided.channel) == ("accept", "Ada Lovelace", "slack")
        await until(lambda: len(slack_api.of("chat.update")) == 1, "the message to be updated")
    finally:
        server.should_exit = True
        await serving
        await store.close()  # type: ignore[attr-defined]
