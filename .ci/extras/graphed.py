"""The LangGraph graph check_langgraph.py parks, and the bridge a `tarry worker` process resumes it with.

One node, ``refund``, stops at ``interrupt()``; approved, it refunds (a line in the file ``REFUNDS_FILE``
names, so the script counts the refunds made by every process). Its threads are checkpointed by
LangGraph's own ``SqliteSaver`` in the file ``CHECKPOINTS_FILE`` names.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any, TypedDict

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, StateGraph
from langgraph.types import interrupt

from tarry.bridges.langgraph import LangGraphBridge


class State(TypedDict, total=False):
    """The order, and what the refund node said."""

    order: str
    said: str


def refund(state: State) -> State:
    """Refund the order once a person approved it."""
    answer: dict[str, Any] = interrupt({"refund": state["order"]})
    if not answer.get("approved"):
        return {"said": f"not refunded: {answer.get('note')}"}
    with Path(os.environ["REFUNDS_FILE"]).open("a") as refunds:
        refunds.write(f"{state['order']}\n")
    return {"said": f"refunded {state['order']}"}


saver = SqliteSaver(sqlite3.connect(os.environ["CHECKPOINTS_FILE"], check_same_thread=False))
saver.setup()
builder = StateGraph(State)
builder.add_node("refund", refund)
builder.add_edge(START, "refund")
graph = builder.compile(checkpointer=saver)
bridge = LangGraphBridge(graph, name="refunds", reply=lambda values: str(values["said"]))
agents = [bridge.agent]
"""What `tarry worker --agents graphed:agents` serves."""
