"""The LangGraph graph the bridge tests park, decide and resume, in this process and in others.

Two nodes run side by side from the start, each stopping at ``interrupt()``: ``refund`` asks to
approve a refund (its resume value says approved or not) and, when the order asks, ``invoice`` asks
for the invoice number with a ``response_schema``. Each refund made appends a line to the file
``TARRY_TEST_REFUNDS`` names: its side effect, counted across processes, made through tarry's ``once`` (a
process whose ``TARRY_TEST_HANG_IN`` is ``refund`` hangs right after it). The checkpointer is
LangGraph's own: ``SqliteSaver`` on a file, or ``PostgresSaver``, which every process reaches.
"""

from __future__ import annotations

import operator
import os
import sqlite3
from pathlib import Path
from typing import Annotated, Any, TypedDict

import psycopg
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, StateGraph
from langgraph.pregel import Pregel
from langgraph.types import interrupt
from psycopg.rows import dict_row

from tarry.approvals import Approval
from tarry.bridges.langgraph import LangGraphBridge, once
from tests.bridges.hang import hang_in

INVOICE_SCHEMA = {"type": "object", "properties": {"invoice": {"type": "string"}}, "required": ["invoice"]}


class Refund(TypedDict, total=False):
    """The graph's state: the order, whether to look its invoice up, and what each node said."""

    order: str
    with_invoice: bool
    said: Annotated[list[str], operator.add]


def refunds_file() -> Path:
    """Where each refund made leaves its line."""
    return Path(os.environ["TARRY_TEST_REFUNDS"])


def refunds_done() -> list[str]:
    """The refunds made so far, by every process."""
    path = refunds_file()
    return path.read_text().splitlines() if path.exists() else []


ENTERED: list[str] = []
"""Each time a ``refund`` node starts, in this process: LangGraph runs a node again from its start on resume."""


def refund(state: Refund) -> Refund:
    """Refund the order once a person approved it; say why not otherwise."""
    ENTERED.append(state["order"])
    answer: dict[str, Any] = interrupt({"refund": state["order"]})
    if not answer.get("approved"):
        return {"said": [f"not refunded: {answer.get('note')}"]}
    return {"said": [once(lambda: make_refund(state["order"]), interrupted=lambda message: message)]}


def make_refund(order: str) -> str:
    """The refund's side effect: a line in the refunds file (then a hang, when this process was told to)."""
    with refunds_file().open("a") as refunds:
        refunds.write(f"{order} {os.getpid()}\n")
    hang_in("refund")
    return f"refunded {order}"


def invoice(state: Refund) -> Refund:
    """Ask a person for the order's invoice number, when the order asks for it."""
    if not state.get("with_invoice"):
        return {}
    answer = interrupt({"question": f"The invoice of {state['order']}?"}, response_schema=INVOICE_SCHEMA)
    return {"said": [f"invoice: {answer}"]}


OPENED: list[psycopg.Connection[Any]] = []
"""The checkpointers' PostgreSQL connections opened in this process, for a test to close."""


def checkpointer(url: str) -> BaseCheckpointSaver[Any]:
    """LangGraph's own saver: ``SqliteSaver`` for a ``sqlite:///`` file, ``PostgresSaver`` for PostgreSQL."""
    if url.startswith("sqlite:///"):
        saver: BaseCheckpointSaver[Any] = SqliteSaver(
            sqlite3.connect(url[len("sqlite:///") :], check_same_thread=False)
        )
    else:
        connection = psycopg.Connection.connect(
            url.replace("postgresql+psycopg://", "postgresql://"),
            autocommit=True,
            prepare_threshold=0,
            row_factory=dict_row,
        )
        OPENED.append(connection)
        saver = PostgresSaver(connection)  # type: ignore[arg-type]
    saver.setup()  # type: ignore[attr-defined]
    return saver


def make_graph(url: str) -> Pregel[Any, Any, Any, Any]:
    """The compiled graph, its threads checkpointed at ``url``."""
    builder = StateGraph(Refund)
    builder.add_node("refund", refund)
    builder.add_node("invoice", invoice)
    builder.add_edge(START, "refund")
    builder.add_edge(START, "invoice")
    return builder.compile(checkpointer=checkpointer(url))


def said(reply: str) -> list[str]:
    """What the nodes said, from the bridge's final reply (the final state as JSON)."""
    import json

    return sorted(json.loads(reply)["said"])


def make_bridge(url: str, *, two_people: bool = False) -> LangGraphBridge:
    """The bridge of the graph checkpointed at ``url``; ``two_people``: a refund needs two approvals."""
    approvals = {"refund": Approval(count=2)} if two_people else None
    return LangGraphBridge(make_graph(url), name="refunds", approvals=approvals)


def start_run(bridge: LangGraphBridge, thread_id: str, *, with_invoice: bool = True) -> None:
    """Run the graph on a new thread until it stops at its interrupts."""
    bridge.graph.invoke(
        {"order": "A17", "with_invoice": with_invoice, "said": []}, {"configurable": {"thread_id": thread_id}}
    )
