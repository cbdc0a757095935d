"""A webhook receiver in a process of its own: ``python -m tests.notify.receiver FOLDER SECRET [SECRET ...]``.

It listens on 127.0.0.1 on a free port, which it writes to ``FOLDER/port``. Each request's signature is verified
with ``standardwebhooks.Webhook(secret).verify`` for every secret given (all must pass), and one JSON line per
request is appended to ``FOLDER/received``: the ``webhook-id``, the event's type, the question's id and whether
it verified. It answers with the status in ``FOLDER/status`` (default 204) after the seconds in ``FOLDER/delay``
(default none); a request that does not verify gets 400.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

FOLDER = Path(sys.argv[1])
VERIFIERS = [Webhook(secret) for secret in sys.argv[2:]]
WRITING = threading.Lock()


def _setting(name: str, default: float) -> float:
    path = FOLDER / name
    try:
        return float(path.read_text())
    except (FileNotFoundError, ValueError):
        return default


class Receive(BaseHTTPRequestHandler):
    """Verifies and records each webhook."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length", "0"))
        body = self.rfile.read(length)
        if len(body) < length:  # its sender died while sending it
            return
        headers = {name.lower(): value for name, value in self.headers.items()}
        try:
            payloads = [verifier.verify(body, headers) for verifier in VERIFIERS]
            payload, verified = payloads[0], True
        except WebhookVerificationError:
            payload, verified = json.loads(body), False
        line = {
            "id": headers.get("webhook-id"),
            "type": payload["type"],
            "question": payload["data"]["id"],
            "verified": verified,
            "at": time.time(),
        }
        delay = _setting("delay", 0.0)
        if delay:
            time.sleep(delay)
        with WRITING, (FOLDER / "received").open("a") as received:
            received.write(json.dumps(line) + "\n")
        status = int(_setting("status", 204)) if verified else 400
        self.send_response(status)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receive)
    server.daemon_threads = True
    (FOLDER / "port.tmp").write_text(str(server.server_address[1]))
    (FOLDER / "port.tmp").rename(FOLDER / "port")
    server.serve_forever()
