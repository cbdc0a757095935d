"""The LangGraph bridge: a graph run stopped at ``interrupt()``, parked in tarry's store and resumed from it.

``bridge = LangGraphBridge(graph, name="refunds")`` wraps a compiled graph with a synchronous checkpointer
(LangGraph's ``SqliteSaver``, ``PostgresSaver``), which keeps the thread's state as ever.
[`park`][tarry.bridges.langgraph.LangGraphBridge.park] stores a thread whose run stopped at interrupts:
one tarry call per interrupt, of the interrupting node's stand-in, whose arguments are the interrupt's
value (and its ``response_schema``). It waits on a form of the schema's fields when tarry can show them
([`form_fields`][tarry.bridges.langgraph.form_fields]), on an approval otherwise.
Carrying the chat on (``bridge.agent`` given to [`continue_chat`][tarry.jobs.continue_chat], the
[`Worker`][tarry.jobs.Worker] or Celery) resumes the thread with ``Command(resume={interrupt id: value})``,
under the chat's turn claim, so in one process at a time. Each interrupt's resume value:

- approved: [`APPROVED`][tarry.bridges.APPROVED], ``{"approved": True}``;
- declined, lapsed or cancelled: ``{"approved": False, "note": ...}``, the decline's note (else tarry's reason);
- a form answered: the answer, ``{field: value}``;
- answered with ``respond``: the person's result, as given.

A run that stops at new interrupts parks again in the same chat; the final state, as text (``reply``), is
the chat's last reply. LangGraph runs a node again from its start when a process died inside it before its
writes were checkpointed: a node's side effect after its interrupt, run through
[`once`][tarry.bridges.langgraph.once], runs once even then.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine, Iterable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TypeVar

from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.config import get_config
from langgraph.pregel import Pregel
from langgraph.types import Command, StateSnapshot, _interrupt_id
from pydantic_core import to_jsonable_python

from tarry.agents import Agent
from tarry.bridges.parking import (
    APPROVED,
    BridgeModel,
    Decided,
    StandIn,
    Step,
    checked_approvals,
    finished_reply,
    park,
    parked_reply,
)
from tarry.carrying import interrupted_message
from tarry.chat import Chat
from tarry.errors import BridgeError
from tarry.fields import Field, fields_from_schema
from tarry.live import current_turn
from tarry.messages import Message, ToolCall
from tarry.policies import Approval
from tarry.questions import Question
from tarry.running import sync_twin
from tarry.store import Store
from tarry.tasks import Task

__all__ = [
    "KEY",
    "InterruptStandIn",
    "LangGraphBridge",
    "LangGraphModel",
    "as_json",
    "form_fields",
    "once",
    "resume_value",
    "transcript",
]

KEY = "langgraph"
"""Where a parked chat keeps the run's thread (``provider_data``)."""


def as_json(values: Any) -> str:
    """The default final reply: the graph's final state as JSON."""
    return json.dumps(to_jsonable_python(values, fallback=repr), sort_keys=True)


def form_fields(arguments: Mapping[str, Any]) -> tuple[Field, ...]:
    """The form an interrupt's call asks for: the fields of its ``response_schema`` when that is a JSON schema
    object whose properties tarry can show as fields; none otherwise (the call is then an approval)."""
    schema = arguments.get("response_schema")
    if not isinstance(schema, Mapping) or schema.get("type") != "object":
        return ()
    try:
        return fields_from_schema(schema)
    except (TypeError, ValueError):
        return ()


class InterruptStandIn(StandIn):
    """A node's stand-in: its interrupts wait on an approval, or, with a ``response_schema`` tarry can show, on a
    form whose answer is the resume value."""

    def approval_policy(self, call: ToolCall) -> Approval | None:
        """No approval for a form interrupt (its form is the question); the node's policy otherwise."""
        return None if form_fields(call.arguments) else super().approval_policy(call)

    async def execute(self, **arguments: Any) -> Any:
        """Ask the form of a form interrupt; an approved interrupt's call only says so."""
        fields = form_fields(arguments)
        if not fields:
            return await super().execute(**arguments)
        message = arguments.get("question") or arguments.get("value") or f"The {self.name} step asks"
        # The question is built here, not with ``self.ask``, so a field may be named ``ttl`` or ``url``.
        question = Question(id="", kind="form", message=str(message), fields=fields, ttl=self.approval_ttl)
        return Task(status="input_required").with_question(question)

    def resume(self, task: Task, *args: Any, **arguments: Any) -> Any:
        """The form's answer, marked as a person's (so the graph resumes with it), once it is given."""
        result = super().resume(task, *args, **arguments)
        return result if isinstance(result, Task) else {"given_by": "a person", "result": result}


class LangGraphBridge:
    """Parks runs of a compiled LangGraph ``graph`` stopped at ``interrupt()``, and resumes them from any process.

    ``graph`` needs a synchronous checkpointer that every process reaches (``SqliteSaver`` on a shared
    file, ``PostgresSaver``): the thread's state stays LangGraph's. ``name`` is the tarry agent's (a worker
    finds the chat's bridge by it). Each node of the graph gets an
    [`InterruptStandIn`][tarry.bridges.langgraph.InterruptStandIn]; ``nodes`` names more (a subgraph's
    node that interrupts). ``approvals`` gives a node's interrupts an [`Approval`][tarry.approvals.Approval]
    policy (default: one person, anyone; a form is answered by one); ``approval_ttl`` is the seconds a
    person has to decide or answer, ``None`` for no limit; ``reply`` turns the final state into the chat's
    last reply (default [`as_json`][tarry.bridges.langgraph.as_json]). Pass ``bridge.agent`` to every
    process that
    carries the chats on.
    """

    def __init__(
        self,
        graph: Pregel[Any, Any, Any, Any],
        *,
        name: str,
        nodes: Iterable[str] = (),
        approvals: Mapping[str, Approval] | None = None,
        approval_ttl: float | None = None,
        reply: Callable[[Any], str] = as_json,
    ) -> None:
        if not isinstance(graph, Pregel):
            raise TypeError(f"LangGraphBridge bridges a compiled LangGraph graph, got {type(graph).__name__}")
        if not isinstance(graph.checkpointer, BaseCheckpointSaver):
            raise ValueError(
                "The graph needs a checkpointer every process reaches (SqliteSaver, PostgresSaver): "
                "compile it with checkpointer=..."
            )
        policies = checked_approvals(approvals)
        self.graph = graph
        """The compiled graph whose runs this bridge parks and resumes."""
        names = dict.fromkeys([*(node for node in graph.nodes if not node.startswith("__")), *nodes])
        stand_ins = [
            InterruptStandIn(node, requires_approval=policies.get(node, Approval()), approval_ttl=approval_ttl)
            for node in names
        ]
        self.agent = Agent(name, model=lambda: LangGraphModel(graph, reply), tools=stand_ins)
        """The tarry agent of the parked chats: give it to whatever carries them on."""

    async def park(self, store: Store, thread_id: str, prompt: str = "") -> Chat:
        """Park the run of thread ``thread_id``, stopped at interrupts: a new stored chat whose calls (one per
        interrupt) wait on their questions. ``prompt`` is the chat's user message. Raises ``ValueError`` when
        the thread waits on no interrupt."""
        if not isinstance(thread_id, str) or not thread_id:
            raise ValueError(f"thread_id must be the non-empty id of a LangGraph thread, got {thread_id!r}")
        snapshot = await asyncio.to_thread(self.graph.get_state, _config(thread_id))
        if not snapshot.interrupts:
            raise ValueError(f"Only a run stopped at interrupt() parks; thread {thread_id!r} waits on none")
        return await park(
            store, self.agent, prompt or f"(a LangGraph run, thread {thread_id})", _reply_of(thread_id, snapshot)
        )

    park_sync = sync_twin(park)


T = TypeVar("T")


@dataclass(frozen=True)
class _Resuming:
    """A thread being resumed by a chat's model turn: the turn's event loop and the interrupts decided."""

    loop: asyncio.AbstractEventLoop
    decided: frozenset[str]
    used: set[str] = field(default_factory=set)
    """The interrupts whose node ran its ``once`` in this resume."""


_resuming: ContextVar[_Resuming | None] = ContextVar("tarry_langgraph_resuming", default=None)


def once(effect: Callable[[], T], *, interrupted: Callable[[str], T]) -> T:
    """Run ``effect``, a node's side effect after its last ``interrupt()``, at most once: call it in the node, once.

    While the bridge resumes a thread (carrying a chat on), the run of ``effect`` is marked started on the tarry
    call of the node's interrupt this resume answered, in a transaction of its own, and its result (as JSON)
    recorded once it returns. LangGraph runs a node again from its start when its process died before the
    node's writes were checkpointed; ``effect`` is then not run again: the recorded result is returned (its
    JSON form), or, when none was recorded (the process died while ``effect`` ran), ``interrupted(message)``,
    ``message`` saying the run was interrupted and may or may not have finished, as tarry tells a model of its
    own interrupted calls. Anywhere else (a graph invoked outside tarry, a node this resume answered no
    interrupt of) it only runs ``effect``. Raises [`BridgeError`][tarry.errors.BridgeError] when a node calls it
    twice in one run (a second effect would read the first one's mark).
    """
    resuming = _resuming.get()
    turn = current_turn.get()
    call_id = None if resuming is None else _answered_interrupt(resuming)
    if resuming is None or turn is None or call_id is None:
        return effect()
    if call_id in resuming.used:
        raise BridgeError("once() runs one side effect per node, after its last interrupt(); this node called it twice")
    resuming.used.add(call_id)

    def wait(step: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(step, resuming.loop).result()

    earlier = wait(turn.start_run(call_id))
    if earlier is not None:
        node = str(get_config().get("metadata", {}).get("langgraph_node", "node"))
        return earlier.result if earlier.finished else interrupted(interrupted_message(node))
    result = effect()
    wait(turn.finish_run(call_id, to_jsonable_python(result, fallback=repr)))
    return result


def _answered_interrupt(resuming: _Resuming) -> str | None:
    """The id of the interrupt of the running node that this resume answered, if any: the node's last one."""
    configurable = get_config().get("configurable", {})
    # LangGraph keeps a task's answers in its scratchpad, this resume's last; an interrupt's id is the hash of the
    # task's namespace and how many answers came before it.
    answers = getattr(configurable.get("__pregel_scratchpad"), "resume", None) or []
    if not answers:
        return None
    interrupt_id = _interrupt_id(str(configurable.get("checkpoint_ns", "")), len(answers) - 1)
    return interrupt_id if interrupt_id in resuming.decided else None


def _config(thread_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id}}


def _reply_of(thread_id: str, snapshot: StateSnapshot) -> Message:
    """The assistant message that parks a thread: its id, and one call per waiting interrupt."""
    calls: list[ToolCall] = []
    for task in snapshot.tasks:
        for waiting in task.interrupts:
            value = to_jsonable_python(waiting.value, fallback=repr)
            arguments = dict(value) if isinstance(value, dict) else {"value": value}
            if isinstance(waiting.response_schema, dict):
                arguments["response_schema"] = waiting.response_schema
            calls.append(ToolCall(waiting.id, task.name, arguments))
    return parked_reply(KEY, {"thread_id": thread_id}, calls, transcript=transcript(snapshot.values))


ROLES = {"human": "user", "ai": "assistant", "tool": "result", "system": "system"}


def transcript(values: Any) -> list[Step]:
    """The thread's state as steps: its ``messages`` when the state holds LangChain messages (prompts, replies,
    tool calls, tool results), else the whole state as JSON, one ``state`` step."""
    messages = values.get("messages") if isinstance(values, Mapping) else None
    if not isinstance(messages, list) or not all(isinstance(message, BaseMessage) for message in messages):
        return [Step("state", as_json(values))]
    steps: list[Step] = []
    for message in messages:
        text = message.content if isinstance(message.content, str) else as_json(message.content)
        if message.type == "tool":
            text = f"{getattr(message, 'name', None) or 'tool'}: {text}"
        if text:
            steps.append(Step(ROLES.get(message.type, message.type), text))
        for call in getattr(message, "tool_calls", None) or []:
            steps.append(Step("call", f"{call['name']}({json.dumps(call['args'], sort_keys=True, default=repr)})"))
    return steps


def resume_value(decision: Decided) -> Any:
    """What an interrupt's ``interrupt()`` returns when the graph resumes: see the module's mapping."""
    if decision.outcome == "approved":
        return dict(APPROVED)
    if decision.outcome == "given":
        return decision.result
    return {"approved": False, "note": decision.message}


class LangGraphModel(BridgeModel):
    """A parked chat's model: resumes the thread with ``Command(resume=...)`` built from the decisions."""

    key = KEY

    def __init__(self, graph: Pregel[Any, Any, Any, Any], reply: Callable[[Any], str] = as_json) -> None:
        self.graph = graph
        self.reply = reply

    async def carry_on(self, state: Any, decided: Mapping[str, Decided]) -> Message:
        """Resume the thread ``state`` names; park it again or return its final state as the reply."""
        token = _resuming.set(_Resuming(asyncio.get_running_loop(), frozenset(decided)))
        try:
            return await asyncio.to_thread(self._carry_on, str(state["thread_id"]), decided)
        finally:
            _resuming.reset(token)

    def _carry_on(self, thread_id: str, decided: Mapping[str, Decided]) -> Message:
        config = _config(thread_id)
        waiting = {pending.id for pending in self.graph.get_state(config).interrupts}
        # A process that died after resuming but before its turn was saved leaves the thread gone on: the
        # decided interrupts wait no more, so it is read, not resumed again.
        if decided and set(decided) <= waiting:
            resume = {call_id: resume_value(decision) for call_id, decision in decided.items()}
            self.graph.invoke(Command(resume=resume), config)
        snapshot = self.graph.get_state(config)
        if snapshot.interrupts:
            return _reply_of(thread_id, snapshot)
        return finished_reply(self.reply(snapshot.values), transcript(snapshot.values))
