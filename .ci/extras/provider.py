"""A provider's HTTP API on 127.0.0.1, speaking its documented wire format, for the check_<provider> scripts.

The server answers every POST from its list of replies in turn and keeps the requests' paths and
bodies. A chat asks for the weather: the first reply calls the ``weather`` tool, the second, sent
once the tool's result is in the request, is the model's answer.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from common import from_the_wheel, passed

from tarry import Chat, tool
from tarry.messages import Model

ANSWER = "Sunny in Lyon."


@tool
def weather(city: str) -> str:
    """Today's weather in a city."""
    return f"{city}: sunny, 24 °C"


@contextmanager
def provider(replies: list[dict[str, Any]]) -> Iterator[tuple[str, list[tuple[str, dict[str, Any]]]]]:
    """Serve ``replies`` as JSON, one per POST; yields the base URL and the requests received."""
    received: list[tuple[str, dict[str, Any]]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            received.append((self.path, body))
            reply = json.dumps(replies[min(len(received), len(replies)) - 1]).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()


def check(
    name: str,
    replies: list[dict[str, Any]],
    make: Callable[[str], Model],
    path: str,
    tool_result_sent: Callable[[dict[str, Any]], bool],
) -> None:
    """Run the chat on ``make(base_url)`` against the local API, and check both requests it sent."""
    from_the_wheel()
    with provider(replies) as (base_url, received):
        chat = Chat(model=make(base_url), tools=[weather])
        asyncio.run(chat.ask("What is the weather in Lyon?"))
    assert chat.messages[-1].role == "assistant" and chat.messages[-1].content == ANSWER, chat.messages
    assert chat.messages[-2].content == "Lyon: sunny, 24 °C", chat.messages
    assert len(received) == 2, received
    assert all(sent_path.split("?")[0].endswith(path) for sent_path, _ in received), received
    assert tool_result_sent(received[1][1]), received[1][1]
    passed(name, f"the {name} adapter called the tool and answered through the provider's wire format on {path}")
