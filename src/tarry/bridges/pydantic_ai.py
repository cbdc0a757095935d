"""The pydantic-ai bridge: a run that ends with ``DeferredToolRequests``, parked in tarry's store and carried on.

``bridge = PydanticAIBridge(agent, name="refunds")`` wraps a pydantic-ai ``Agent`` whose output type
admits ``DeferredToolRequests``. [`park`][tarry.bridges.pydantic_ai.PydanticAIBridge.park] stores a run
that ended with them: its message history, and one tarry question per approval and per external call
(or question). People decide them as any question. Carrying the chat on (``bridge.agent`` given to
[`continue_chat`][tarry.jobs.continue_chat], the [`Worker`][tarry.jobs.Worker] or Celery) builds
``DeferredToolResults`` from the decisions and runs the agent on, under the chat's turn claim:

- an approval accepted is ``ToolApproved()`` (pydantic-ai runs the tool); declined, lapsed or
  cancelled, ``ToolDenied`` with the decline's note (else tarry's reason);
- an external call (or question) answered with ``respond`` gets the person's result; declined, lapsed
  or cancelled, ``ToolFailed`` with the note; accepted with no result, ``ToolFailed`` saying so.

An approved call's tool runs once: its run is marked started in tarry's store before the tool runs and its
result recorded after ([`run_once`][tarry.bridges.run_once]), so a process that dies while the run goes on
leaves the next one to return the recorded result, or to tell the model the call was interrupted, rather
than run the tool again. A run that ends with new deferred calls parks again in the same chat; its final
output (as text) is the chat's last reply.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic_ai import Agent as PydanticAgent
from pydantic_ai import DeferredToolRequests, DeferredToolResults, RunContext, ToolApproved, ToolDenied
from pydantic_ai.agent import AgentRunResult
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import ToolFailed
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelRequestPart,
    ModelResponsePart,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.toolsets import AbstractToolset, ExternalToolset, FunctionToolset, ToolsetTool, WrapperToolset
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
from tarry.messages import Message, ToolCall
from tarry.policies import Approval
from tarry.running import sync_twin
from tarry.store import Store

__all__ = ["KEY", "OnceToolset", "PydanticAIBridge", "PydanticAIModel", "RunsOnce", "transcript"]

KEY = "pydantic_ai"
"""Where a parked chat keeps the run's message history (``provider_data``) and each call's kind."""


class PydanticAIBridge:
    """Parks runs of a pydantic-ai ``agent`` in tarry's store, and carries them on from any process.

    ``name`` is the tarry agent's (a worker finds the chat's bridge by it). Each tool of ``agent``'s
    function and external toolsets gets a [`StandIn`][tarry.bridges.StandIn]; ``tools`` names more
    (a tool of a renamed or prefixed toolset, say). ``approvals`` gives a tool's calls an
    [`Approval`][tarry.approvals.Approval] policy (two people, a group; default: one person, anyone);
    ``approval_ttl`` is the seconds a person has to decide, ``None`` for no limit. Pass ``bridge.agent``
    to every process that carries the chats on.
    """

    def __init__(
        self,
        agent: PydanticAgent[Any, Any],
        *,
        name: str,
        tools: Iterable[str] = (),
        approvals: Mapping[str, Approval] | None = None,
        approval_ttl: float | None = None,
    ) -> None:
        if not isinstance(agent, PydanticAgent):
            raise TypeError(f"PydanticAIBridge bridges a pydantic_ai.Agent, got {type(agent).__name__}")
        policies = checked_approvals(approvals)
        self.pydantic_agent = agent
        """The pydantic-ai agent whose runs this bridge parks and carries on."""
        self.approvals = policies
        names = dict.fromkeys([*tool_names(agent), *tools])
        stand_ins = [
            StandIn(tool_name, requires_approval=policies.get(tool_name, Approval()), approval_ttl=approval_ttl)
            for tool_name in names
        ]
        self.agent = Agent(name, model=lambda: PydanticAIModel(agent), tools=stand_ins)
        """The tarry agent of the parked chats: give it to whatever carries them on."""

    async def park(self, store: Store, result: AgentRunResult[Any]) -> Chat:
        """Park ``result``, a run that ended with ``DeferredToolRequests``: a new stored chat whose calls wait on their
        questions. Raises ``ValueError`` when the run did not end with deferred calls."""
        if not isinstance(result.output, DeferredToolRequests):
            raise ValueError(
                f"Only a run that ended with DeferredToolRequests parks; this one output {result.output!r}"
            )
        history = result.all_messages()
        return await park(store, self.agent, prompt_of(history), reply_of(history, result.output))

    park_sync = sync_twin(park)


def tool_names(agent: PydanticAgent[Any, Any]) -> list[str]:
    """The names of the tools of ``agent``'s function and external toolsets."""
    found: list[str] = []

    def visit(toolset: AbstractToolset[Any]) -> None:
        if isinstance(toolset, FunctionToolset):
            found.extend(toolset.tools)
        elif isinstance(toolset, ExternalToolset):
            found.extend(definition.name for definition in toolset.tool_defs)

    for toolset in agent.toolsets:
        toolset.apply(visit)
    return found


def prompt_of(history: list[ModelMessage]) -> str:
    """The run's first user prompt, as text (the parked chat's user message)."""
    for message in history:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, UserPromptPart):
                    return part.content if isinstance(part.content, str) else str(part.content)
    return "(a pydantic-ai run)"


def reply_of(history: list[ModelMessage], requests: DeferredToolRequests) -> Message:
    """The assistant message that parks a run: its history, and one call per deferred call."""
    calls = [
        _call(part, kind, requests.metadata.get(part.tool_call_id))
        for part, kind in [
            *((part, "approval") for part in requests.approvals),
            *((part, requests.kind(part.tool_call_id)) for part in requests.calls),
        ]
    ]
    state = ModelMessagesTypeAdapter.dump_python(history, mode="json")
    return parked_reply(KEY, state, calls, transcript=transcript(history))


def transcript(history: list[ModelMessage]) -> list[Step]:
    """The run's message history as steps: its prompts, the model's text, its tool calls and what they returned."""
    steps: list[Step] = []
    for message in history:
        for part in message.parts:
            step = _step(part)
            if step is not None:
                steps.append(step)
    return steps


def _step(part: ModelRequestPart | ModelResponsePart) -> Step | None:
    if isinstance(part, UserPromptPart):
        return Step("user", part.content if isinstance(part.content, str) else str(part.content))
    if isinstance(part, SystemPromptPart):
        return Step("system", part.content)
    if isinstance(part, TextPart):
        return Step("assistant", part.content)
    if isinstance(part, ToolCallPart):
        return Step("call", f"{part.tool_name}({part.args_as_json_str()})")
    if isinstance(part, ToolReturnPart):
        return Step("result", f"{part.tool_name}: {part.model_response_str()}")
    if isinstance(part, RetryPromptPart):
        return Step("result", f"{part.tool_name or 'retry'}: {part.model_response()}")
    return None  # thinking, files and the like: not shown


def _call(part: ToolCallPart, kind: str, metadata: dict[str, Any] | None) -> ToolCall:
    data: dict[str, Any] = {"kind": kind}
    if metadata:
        data["metadata"] = to_jsonable_python(metadata)
    return ToolCall(part.tool_call_id, part.tool_name, part.args_as_dict(), provider_data={KEY: data})


class PydanticAIModel(BridgeModel):
    """A parked chat's model: runs the pydantic-ai agent on with ``DeferredToolResults`` built from the decisions."""

    key = KEY

    def __init__(self, agent: PydanticAgent[Any, Any]) -> None:
        self.agent = agent

    async def carry_on(self, state: Any, decided: Mapping[str, Decided]) -> Message:
        """Run the agent on from its history ``state``; park it again or return its output as the reply."""
        results = DeferredToolResults()
        for call_id, decision in decided.items():
            kind = (decision.call.provider_data or {}).get(KEY, {}).get("kind", "approval")
            if kind == "approval":
                results.approvals[call_id] = _approval(decision)
            else:
                results.calls[call_id] = _call_result(decision)
        history = ModelMessagesTypeAdapter.validate_python(state)
        approved = frozenset(call_id for call_id, decision in decided.items() if decision.outcome == "approved")
        result = await self.agent.run(
            message_history=history, deferred_tool_results=results, capabilities=[RunsOnce(approved)]
        )
        if isinstance(result.output, DeferredToolRequests):
            return reply_of(result.all_messages(), result.output)
        output = result.output if isinstance(result.output, str) else repr(result.output)
        return finished_reply(output, transcript(result.all_messages()))


@dataclass
class RunsOnce(AbstractCapability[Any]):
    """Runs the tools of the ``approved`` calls (by id) once across processes: see
    [`run_once`][tarry.bridges.run_once]."""

    approved: frozenset[str]

    def get_wrapper_toolset(self, toolset: AbstractToolset[Any]) -> AbstractToolset[Any]:
        """The agent's toolset, each approved call run once."""
        return OnceToolset(toolset, self.approved)


@dataclass
class OnceToolset(WrapperToolset[Any]):
    """A toolset whose calls among ``approved`` (by id) run once; an interrupted one fails with tarry's message."""

    approved: frozenset[str] = frozenset()

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        """Run the call through the wrapped toolset; an approved call at most once."""
        call_id = ctx.tool_call_id
        if call_id is None or call_id not in self.approved:
            return await self.wrapped.call_tool(name, tool_args, ctx, tool)
        return await run_once(
            call_id,
            name,
            lambda: self.wrapped.call_tool(name, tool_args, ctx, tool),
            as_json=lambda result: to_jsonable_python(result, fallback=repr),
            interrupted=_interrupted,
        )


def _interrupted(message: str) -> Any:
    raise ToolFailed(message)


def _approval(decision: Decided) -> ToolApproved | ToolDenied:
    if decision.outcome == "approved":
        return ToolApproved()
    if decision.outcome == "given":
        return ToolDenied(f"A person gave this call's result instead of running it: {decision.result!r}")
    return ToolDenied(decision.message)


def _call_result(decision: Decided) -> Any:
    if decision.outcome == "given":
        return decision.result
    if decision.outcome == "approved":
        return ToolFailed("A person approved this call but gave no result for it.")
    return ToolFailed(decision.message)
