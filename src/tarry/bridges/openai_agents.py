"""The OpenAI Agents SDK bridge: a run stopped on tool approvals, parked in tarry's store with its ``RunState``.

``bridge = OpenAIAgentsBridge(agent, name="refunds")`` wraps an Agents SDK ``Agent`` whose function
tools ask for approval (``@function_tool(needs_approval=True)``).
[`park`][tarry.bridges.openai_agents.OpenAIAgentsBridge.park] stores a run whose result has
``interruptions``: its ``RunState`` (``to_json()``, as the SDK serializes it) and one tarry question per
interruption, under the SDK's call id. People decide them as any question. Carrying the chat on
(``bridge.agent`` given to [`continue_chat`][tarry.jobs.continue_chat], the [`Worker`][tarry.jobs.Worker]
or Celery) loads the state (``RunState.from_json``), applies the decisions and runs the agent on with
``Runner.run(agent, state)``, under the chat's turn claim, so in one process at a time:

- approved: ``state.approve(item)``, and the SDK runs the function tool inside ``Runner.run``, with the run's
  context, once: its run is marked started in tarry's store before the tool runs and its output recorded after
  ([`run_once`][tarry.bridges.run_once], through [`running_once`][tarry.bridges.openai_agents.running_once]),
  so a process killed inside the tool leaves the next one to hand the SDK the recorded output, or to tell the
  model the call was interrupted, rather than run the tool again;
- declined, lapsed or cancelled: ``state.reject(item, rejection_message=...)`` with the decline's note
  (else tarry's reason), which the SDK sends the model as the call's output;
- answered with ``respond``: rejected too, with the person's result (text, or JSON) as that output, so
  the tool does not run and the model reads what the person gave.

A run that stops on new interruptions parks again in the same chat; its final output (as text) is the
chat's last reply.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from agents import Agent as SdkAgent
from agents import FunctionTool, RunConfig, Runner, RunState, ToolApprovalItem
from agents.result import RunResult
from agents.tool_context import ToolContext
from pydantic_core import to_jsonable_python

from tarry.agents import Agent
from tarry.bridges.parking import (
    BridgeModel,
    Decided,
    StandIn,
    Step,
    checked_approvals,
    finished_reply,
    park,
    parked_reply,
    run_once,
)
from tarry.chat import Chat
from tarry.errors import CorruptStateError
from tarry.messages import Message, ToolCall
from tarry.policies import Approval
from tarry.running import sync_twin
from tarry.store import Store

__all__ = ["KEY", "OpenAIAgentsBridge", "OpenAIAgentsModel", "running_once", "transcript"]

KEY = "openai_agents"
"""Where a parked chat keeps the run's ``RunState`` as the SDK's JSON (``provider_data``)."""


class OpenAIAgentsBridge:
    """Parks runs of an Agents SDK ``agent`` in tarry's store, and carries them on from any process.

    ``name`` is the tarry agent's (a worker finds the chat's bridge by it). Each function tool of
    ``agent`` gets a [`StandIn`][tarry.bridges.StandIn]; ``tools`` names more (a tool of an agent
    handed off to, say). ``approvals`` gives a tool's calls an [`Approval`][tarry.approvals.Approval]
    policy (two people, a group; default: one person, anyone); ``approval_ttl`` is the seconds a person
    has to decide, ``None`` for no limit. ``run_config`` is passed to ``Runner.run`` when a run goes on.
    Pass ``bridge.agent`` to every process that carries the chats on.
    """

    def __init__(
        self,
        agent: SdkAgent[Any],
        *,
        name: str,
        tools: Iterable[str] = (),
        approvals: Mapping[str, Approval] | None = None,
        approval_ttl: float | None = None,
        run_config: RunConfig | None = None,
    ) -> None:
        if not isinstance(agent, SdkAgent):
            raise TypeError(f"OpenAIAgentsBridge bridges an agents.Agent, got {type(agent).__name__}")
        policies = checked_approvals(approvals)
        self.sdk_agent = agent
        """The Agents SDK agent whose runs this bridge parks and carries on."""
        self.approvals = policies
        function_tools = {tool.name: tool for tool in agent.tools if isinstance(tool, FunctionTool)}
        described = {tool.name: tool.description for tool in function_tools.values()}
        stand_ins = [
            StandIn(
                tool_name,
                description=described.get(tool_name, ""),
                requires_approval=policies.get(tool_name, Approval()),
                approval_ttl=approval_ttl,
            )
            for tool_name in dict.fromkeys([*function_tools, *tools])
        ]
        self.agent = Agent(name, model=lambda: OpenAIAgentsModel(agent, run_config), tools=stand_ins)
        """The tarry agent of the parked chats: give it to whatever carries them on."""

    async def park(self, store: Store, result: RunResult) -> Chat:
        """Park ``result``, a run stopped on ``interruptions``: a new stored chat whose calls wait on their questions.
        Raises ``ValueError`` when the run was not interrupted."""
        if not result.interruptions:
            raise ValueError(f"Only a run stopped on interruptions parks; this one output {result.final_output!r}")
        return await park(store, self.agent, prompt_of(result.input), reply_of(result))

    park_sync = sync_twin(park)


def prompt_of(given: str | Sequence[Any]) -> str:
    """The run's first user input, as text (the parked chat's user message)."""
    if isinstance(given, str):
        return given
    for item in given:
        if isinstance(item, Mapping) and item.get("role") == "user":
            content = item.get("content")
            return content if isinstance(content, str) else json.dumps(content, default=str)
    return "(an OpenAI Agents SDK run)"


def reply_of(result: RunResult) -> Message:
    """The assistant message that parks a run: its ``RunState`` as JSON, and one call per interruption."""
    calls = [_call(item) for item in result.interruptions]
    return parked_reply(KEY, result.to_state().to_json(), calls, transcript=transcript(result))


def transcript(result: RunResult) -> list[Step]:
    """The run's items as steps (``to_input_list()``, the input and every item the run made): messages, function
    calls and their outputs; other items (reasoning, hosted tools) by their type."""
    names: dict[str, str] = {}
    steps: list[Step] = []
    for item in result.to_input_list():
        given = dict(item)
        kind = given.get("type")
        if kind == "function_call":
            names[str(given.get("call_id"))] = str(given.get("name"))
            steps.append(Step("call", f"{given.get('name')}({given.get('arguments') or ''})"))
        elif kind == "function_call_output":
            name = names.get(str(given.get("call_id")), "tool")
            steps.append(Step("result", f"{name}: {_text(given.get('output'))}"))
        elif given.get("role") in ("user", "assistant", "system", "developer"):
            role = "system" if given["role"] == "developer" else str(given["role"])
            steps.append(Step(role, _text(given.get("content"))))
        else:
            steps.append(Step("state", f"{kind}: {json.dumps(given, default=str)}"))
    return steps


def _text(content: Any) -> str:
    """A message's content or a call's output as text: its text parts joined, else JSON."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [part.get("text") for part in content if isinstance(part, Mapping)]
        if parts and all(isinstance(part, str) for part in parts):
            return "\n".join(str(part) for part in parts)
    return json.dumps(content, default=str)


def _call(item: ToolApprovalItem) -> ToolCall:
    if not item.call_id or not item.name:
        raise ValueError(f"tarry parks function tool approvals only; this interruption has no call id or name: {item}")
    try:
        arguments = json.loads(item.arguments or "{}")
    except json.JSONDecodeError:
        arguments = {"arguments": item.arguments}
    if not isinstance(arguments, dict):
        arguments = {"arguments": arguments}
    return ToolCall(item.call_id, item.name, arguments)


class OpenAIAgentsModel(BridgeModel):
    """A parked chat's model: loads the ``RunState``, approves or rejects each interruption, runs the agent on."""

    key = KEY

    def __init__(self, agent: SdkAgent[Any], run_config: RunConfig | None = None) -> None:
        self.agent = agent
        self.run_config = run_config

    async def carry_on(self, state: Any, decided: Mapping[str, Decided]) -> Message:
        """Run the agent on from its ``RunState`` JSON ``state``; park it again or return its output as the reply."""
        approved = {call_id for call_id, made in decided.items() if made.outcome == "approved"}
        agent = running_once(self.agent, approved)
        run_state = await RunState.from_json(agent, state)
        for item in run_state.get_interruptions():
            decision = decided.get(item.call_id or "")
            if decision is None:
                raise CorruptStateError(f"The parked run's {item.name} call {item.call_id} was never a tarry question")
            if decision.outcome == "approved":
                run_state.approve(item)
            else:
                run_state.reject(item, rejection_message=rejection_of(decision))
        result = await Runner.run(agent, run_state, run_config=self.run_config)
        if result.interruptions:
            return reply_of(result)
        output = result.final_output
        return finished_reply(output if isinstance(output, str) else repr(output), transcript(result))


def running_once(agent: SdkAgent[Any], approved: Collection[str]) -> SdkAgent[Any]:
    """A clone of ``agent`` whose function tools, called under a call id of ``approved``, run once across
    processes ([`run_once`][tarry.bridges.run_once]): a later run of the turn gets the recorded output, or, when
    the tool's run was interrupted, tarry's message saying so as the call's output. ``agent`` when none is."""
    if not approved:
        return agent

    def once(tool: FunctionTool) -> FunctionTool:
        invoke = tool.on_invoke_tool

        async def invoke_once(context: ToolContext[Any], arguments: str) -> Any:
            if context.tool_call_id not in approved:
                return await invoke(context, arguments)
            return await run_once(
                context.tool_call_id,
                tool.name,
                lambda: invoke(context, arguments),
                as_json=lambda output: to_jsonable_python(output, fallback=str),
                interrupted=lambda message: message,
            )

        return dataclasses.replace(tool, on_invoke_tool=invoke_once)

    return agent.clone(tools=[once(tool) if isinstance(tool, FunctionTool) else tool for tool in agent.tools])


def rejection_of(decision: Decided) -> str:
    """What the model reads as the output of a call not approved: the decline's note, or the person's result."""
    if decision.outcome == "given":
        return decision.result if isinstance(decision.result, str) else json.dumps(decision.result, default=str)
    return decision.message
