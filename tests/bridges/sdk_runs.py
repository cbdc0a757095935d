"""The Agents SDK agent the bridge tests park, decide and carry on, in this process and in others.

Its model is the SDK's ``OpenAIResponsesModel`` on a real ``AsyncOpenAI`` client; respx answers its
requests at the HTTP boundary (``openai_api``) with Responses API bodies computed from each request
(no network): the model calls ``refund`` (which needs approval) and, when the prompt asks, ``lookup``
(which needs approval too); once the calls' outputs are in, it replies with what each returned, so a
test reads what reached the model. Each run of ``refund`` appends a line to the file
``TARRY_TEST_REFUNDS`` names (its side effect, counted across processes); when ``TARRY_TEST_REFUND_STARTED``
names a file, it appends there first and then waits for ``TARRY_TEST_REFUND_GO`` to exist.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import respx
from agents import Agent, OpenAIResponsesModel, function_tool, set_tracing_disabled
from openai import AsyncOpenAI

from tarry.approvals import Approval
from tarry.bridges.openai_agents import OpenAIAgentsBridge
from tests.bridges.runs import refunds_file
from tests.models.httpx2_mocker import HTTPX2Mocker  # registers respx's "httpx2" mocker, which the SDK's client needs

__all__ = ["PROMPT", "HTTPX2Mocker", "make_agent", "make_bridge", "openai_api"]

PROMPT = "Refund order A17 and look up its invoice"
API = "https://api.openai.test/v1"


def usage() -> dict[str, Any]:
    return {
        "input_tokens": 10,
        "output_tokens": 5,
        "total_tokens": 15,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens_details": {"reasoning_tokens": 0},
    }


def response(output: list[dict[str, Any]]) -> httpx.Response:
    """A completed Responses API response with ``output``."""
    body = {
        "id": "resp_test",
        "object": "response",
        "created_at": 1_700_000_000,
        "model": "gpt-test",
        "status": "completed",
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": usage(),
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "metadata": {},
    }
    return httpx.Response(200, json=body)


def call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": f"fc_{call_id}",
        "call_id": call_id,
        "name": name,
        "arguments": json.dumps(arguments),
        "status": "completed",
    }


def text(content: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": "msg_test",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": content, "annotations": []}],
    }


def answer(request: httpx.Request) -> httpx.Response:
    """Call the tools first; then say what each call returned (``name: output``, joined by `` | ``)."""
    items = json.loads(request.content)["input"]
    items = [{"role": "user", "content": items}] if isinstance(items, str) else items
    names = {item["call_id"]: item["name"] for item in items if item.get("type") == "function_call"}
    outputs = [item for item in items if item.get("type") == "function_call_output"]
    if outputs:
        return response([text(" | ".join(f"{names[item['call_id']]}: {item['output']}" for item in outputs))])
    prompt = next(item["content"] for item in items if item.get("role") == "user")
    if prompt == "Hello":
        return response([text("Hello! Which order?")])
    run = uuid.uuid4().hex[:8]  # the API's call ids differ from run to run
    calls = [call(f"call_refund_{run}", "refund", {"order": "A17"})]
    if "look up" in prompt:
        calls.append(call(f"call_lookup_{run}", "lookup", {"invoice_of": "A17"}))
    return response(calls)


@contextmanager
def openai_api() -> Iterator[respx.Route]:
    """Answer the Responses API for this block (``answer``); the route records each request."""
    with respx.mock(using="httpx2", assert_all_mocked=True, assert_all_called=False) as router:
        yield router.post(f"{API}/responses").mock(side_effect=answer)


def make_agent() -> Agent[Any]:
    """The Agents SDK agent: ``refund`` and ``lookup`` need approval."""
    set_tracing_disabled(True)  # the SDK would export traces to OpenAI

    @function_tool(needs_approval=True)
    def refund(order: str) -> str:
        """Refund an order."""
        started = os.environ.get("TARRY_TEST_REFUND_STARTED")
        if started:
            with Path(started).open("a") as marks:
                marks.write(f"{order} {os.getpid()}\n")
            while not Path(os.environ["TARRY_TEST_REFUND_GO"]).exists():
                time.sleep(0.01)
        with refunds_file().open("a") as refunds:
            refunds.write(f"{order} {os.getpid()}\n")
        return f"Refunded {order}"

    @function_tool(needs_approval=True)
    def lookup(invoice_of: str) -> str:
        """Look an invoice up in the accounts system."""
        return f"INV-of-{invoice_of}"

    client = AsyncOpenAI(api_key="sk-test", base_url=API, max_retries=0)
    model = OpenAIResponsesModel(model="gpt-test", openai_client=client)
    return Agent(name="refunds", instructions="Refund what is asked.", model=model, tools=[refund, lookup])


def make_bridge(*, two_people: bool = False, ttl: float | None = None) -> OpenAIAgentsBridge:
    """The bridge of the agent; ``two_people``: a refund needs two approvals."""
    approvals = {"refund": Approval(count=2)} if two_people else None
    return OpenAIAgentsBridge(make_agent(), name="refunds", approvals=approvals, approval_ttl=ttl)
