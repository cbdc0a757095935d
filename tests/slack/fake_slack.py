"""A stand-in for Slack's Web API on 127.0.0.1, answering in Slack's documented wire format.

slack_sdk's ``AsyncWebClient`` sends its requests with aiohttp, which respx (an httpx mock) cannot see, so
the tests point the client's ``base_url`` at this server instead: the requests cross a real HTTP boundary,
and each is recorded (method, JSON body, authorization) for the tests to read.
"""

from __future__ import annotations

import asyncio
import itertools
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

BOT_TOKEN = "xoxb-test-bot-token"
DM_CHANNELS = {"U0ADA": "D0ADA", "U0BOB": "D0BOB"}
"""chat.postMessage to a user id posts in the bot's direct message with them, and answers with its D… id."""


@dataclass
class Call:
    """One request the fake received."""

    method: str
    body: dict[str, Any]
    authorization: str | None


class FakeSlack:
    """Slack's ``chat.postMessage``, ``chat.update``, ``chat.postEphemeral`` and ``views.open``, in a thread."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.fail_next: dict[str, str] = {}
        """Method name → the Slack error its next call answers (``{"ok": false, "error": ...}``)."""
        self._ts = itertools.count(1)
        self._lock = threading.Lock()
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.bind(("127.0.0.1", 0))
        self.base_url = f"http://127.0.0.1:{self._socket.getsockname()[1]}/api/"
        self._server: uvicorn.Server | None = None
        self._thread = threading.Thread(target=self._run, name="fake-slack", daemon=True)

    def of(self, method: str) -> list[dict[str, Any]]:
        """The bodies of the calls of ``method``, in order."""
        with self._lock:
            return [call.body for call in self.calls if call.method == method]

    async def _answer(self, request: Request) -> JSONResponse:
        method = request.path_params["method"]
        body = await request.json()
        with self._lock:
            self.calls.append(Call(method, body, request.headers.get("authorization")))
            error = self.fail_next.pop(method, None)
        if error is not None:
            return JSONResponse({"ok": False, "error": error})
        return JSONResponse(self._success(method, body))

    def _success(self, method: str, body: dict[str, Any]) -> dict[str, Any]:
        if method == "chat.postMessage":
            channel = DM_CHANNELS.get(body["channel"], body["channel"])
            ts = f"1764880000.{next(self._ts):06d}"
            message = {"type": "message", "user": "U0BOT", "bot_id": "B0BOT", "text": body["text"], "ts": ts}
            return {"ok": True, "channel": channel, "ts": ts, "message": {**message, "blocks": body.get("blocks")}}
        if method == "chat.update":
            message = {"type": "message", "user": "U0BOT", "text": body["text"], "blocks": body.get("blocks")}
            return {"ok": True, "channel": body["channel"], "ts": body["ts"], "text": body["text"], "message": message}
        if method == "chat.postEphemeral":
            return {"ok": True, "message_ts": f"1764880000.{next(self._ts):06d}"}
        if method == "views.open":
            view = {**body["view"], "id": "V0MODAL", "team_id": "T0TEAM", "state": {"values": {}}, "hash": "1.abc"}
            return {"ok": True, "view": view}
        return {"ok": False, "error": "unknown_method"}

    def _run(self) -> None:
        app = Starlette(routes=[Route("/api/{method}", self._answer, methods=["POST"])])
        self._server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
        asyncio.run(self._server.serve(sockets=[self._socket]))

    def __enter__(self) -> FakeSlack:
        self._thread.start()
        deadline = time.monotonic() + 30
        while not (self._server is not None and self._server.started):
            assert self._thread.is_alive() and time.monotonic() < deadline, "the fake Slack API did not start"
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._server is not None:
            self._server.should_exit = True
        self._thread.join(timeout=30)
