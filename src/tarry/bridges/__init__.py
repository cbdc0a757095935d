"""Bridges: another framework's run that waits on people, parked in tarry's store as a stored chat.

A run of another agent framework that stops on calls waiting for a person (approvals, results
given from outside) is kept as a stored chat: one assistant message carries the run's own state
(its ``provider_data``, under the framework's key) and one tool call per waiting call, each a
[`StandIn`][tarry.bridges.StandIn] whose approval is a tarry question. So the inbox, the CLI, the
JSON API, policies, expiry and the trail treat it as any chat. Carrying the chat on (any process, the
embedded worker, Celery) asks its model, which is the bridge: it reads the decisions back
([`Decided`][tarry.bridges.Decided]) and runs the foreign agent on, under the chat's turn claim.

The pydantic-ai bridge is [`tarry.bridges.pydantic_ai`][tarry.bridges.pydantic_ai] (``pip install
'tarry[pydantic-ai]'``), the LangGraph bridge [`tarry.bridges.langgraph`][tarry.bridges.langgraph]
(``pip install 'tarry[langgraph]'``), the OpenAI Agents SDK bridge
[`tarry.bridges.openai_agents`][tarry.bridges.openai_agents] (``pip install 'tarry[openai-agents]'``);
this package's own names import no framework.
"""

from tarry.bridges.parking import (
    APPROVED,
    BridgeModel,
    Decided,
    StandIn,
    Step,
    finished_reply,
    new_steps,
    park,
    parked_reply,
    run_once,
    transcript_of,
)

__all__ = [
    "APPROVED",
    "BridgeModel",
    "Decided",
    "StandIn",
    "Step",
    "finished_reply",
    "new_steps",
    "park",
    "parked_reply",
    "run_once",
    "transcript_of",
]
