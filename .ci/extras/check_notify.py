"""`tarry[notify]` alone: a question asked reaches a webhook endpoint, signed per Standard Webhooks."""

from __future__ import annotations

import asyncio
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

from common import from_the_wheel, passed, refunds
from standardwebhooks import Webhook

from tarry.jobs.notifier import Notifier
from tarry.jobs.webhook import WebhookSender
from tarry.store import Store

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
received: list[Any] = []


class Endpoint(BaseHTTPRequestHandler):
    """Verifies each webhook and keeps it."""

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"]))
        received.append(Webhook(SECRET).verify(body, dict(self.headers)))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


async def main() -> str:
    endpoint = HTTPServer(("127.0.0.1", 0), Endpoint)
    threading.Thread(target=endpoint.serve_forever, daemon=True).start()
    async with Store(f"sqlite:///{Path(tempfile.mkdtemp()) / 'chats.db'}") as store:
        await store.setup()
        chat = await store.create_chat(agent=refunds)
        await chat.ask("Order A17 arrived broken.")
        (question,) = await chat.pending_questions()
        hook = WebhookSender(f"http://127.0.0.1:{endpoint.server_port}/hook", SECRET)
        assert await Notifier(store, [hook]).deliver() == 1
        await hook.aclose()
        (message,) = received
        assert (message["type"], message["data"]["id"]) == ("question.asked", question.id), message
        (delivery,) = await store.deliveries()
        assert delivery.state == "sent", delivery
    endpoint.shutdown()
    return question.id


if __name__ == "__main__":
    from_the_wheel()
    question_id = asyncio.run(main())
    passed("notify", f"the webhook of question {question_id} arrived, its signature verified")
