"""HTTP mocks for the provider SDKs, and the tools the adapter tests chat with.

The SDKs send their requests through ``httpx2`` (a fork of httpx) that respx does not patch
by itself. ``HTTPX2Mocker`` is a respx mocker for it: respx routes, patterns and recorded
calls work as usual, and every request that reaches an httpx2 transport is answered by them
(an unmatched one fails the test, so nothing reaches the network).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import respx

from tarry import Tool, tool
from tests.models.httpx2_mocker import HTTPX2Mocker  # noqa: F401 (registers respx's "httpx2" mocker)


@pytest.fixture
def http() -> Iterator[respx.MockRouter]:
    """A respx router that answers every HTTP request the SDKs make; unmatched requests fail."""
    with respx.mock(using="httpx2", assert_all_mocked=True, assert_all_called=False) as router:
        yield router


@pytest.fixture(autouse=True)
def _no_provider_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests set their own keys and URLs; the machine's must not leak in."""
    for name in (
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "OPENAI_ORG_ID",
        "OPENAI_PROJECT_ID",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "ANTHROPIC_BASE_URL",
        "GEMINI_API_KEY",
        "GOOGLE_API_KEY",
        "GOOGLE_GENAI_USE_VERTEXAI",
        "GOOGLE_CLOUD_PROJECT",
    ):
        monkeypatch.delenv(name, raising=False)


def sent(route: respx.Route, number: int = 0) -> Any:
    """The JSON body of the ``number``-th request a route received."""
    return json.loads(route.calls[number].request.content)


def sse(events: list[Any], *, named: bool = False, done: str | None = None) -> httpx.Response:
    """A server-sent events response: each item is a JSON ``data:`` line (with ``event:`` when ``named``)."""
    lines = []
    for item in events:
        if named:
            lines.append(f"event: {item['type']}\n")
        lines.append(f"data: {json.dumps(item)}\n\n")
    if done is not None:
        lines.append(f"data: {done}\n\n")
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content="".join(lines).encode())


@tool
def get_weather(city: str) -> str:
    """Tells the weather in a city."""
    return {"Paris": "sunny, 21°C", "Rome": "cloudy, 18°C"}.get(city, "unknown")


class TransferMoney(Tool):
    """Moves money to another account."""

    requires_approval = True

    def execute(self, amount: int, to: str) -> str:
        return f"Sent {amount} to {to}"


WEATHER_SCHEMA = {
    "additionalProperties": False,
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}
TRANSFER_SCHEMA = {
    "additionalProperties": False,
    "type": "object",
    "properties": {"amount": {"type": "integer"}, "to": {"type": "string"}},
    "required": ["amount", "to"],
}


@pytest.fixture(scope="session")
def llama_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The ``/v1`` URL of a llama-cpp-python server with Gemma 3 270M, started once per test session."""
    from tests.models import llama_server

    reason = llama_server.missing()
    if reason is not None:
        llama_server.unavailable(reason)
    folder = tmp_path_factory.mktemp("llama")
    with llama_server.running_server(llama_server.model_file(folder), folder / "server.log") as url:
        yield url
