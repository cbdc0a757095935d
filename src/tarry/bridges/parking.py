"""What every bridge shares: a foreign run parked as a stored chat, stand-ins for its calls, decisions read back.

A parked run is a stored chat whose assistant message holds the run's state (``provider_data[key]``,
JSON the framework wrote) and, as its tool calls, the calls that wait, under the framework's ids.
Each call is a [`StandIn`][tarry.bridges.StandIn]'s: it needs a person's approval, so it waits on a
tarry question like any call. An approval runs the stand-in, whose result only says "approved"
(the framework runs its own tool when the run goes on); a decline, a lapse or a cancellation closes
the call with tarry's error result and its note; [`respond`][tarry.store.Store.respond] closes it
with the person's result. When no call waits, tarry asks the chat's model, under the chat's turn
claim: a bridge's model is a [`BridgeModel`][tarry.bridges.BridgeModel], which reads each call's
outcome back ([`Decided`][tarry.bridges.Decided]) and runs the foreign agent on. A framework that runs an
approved call's tool itself as its run goes on runs it through [`run_once`][tarry.bridges.run_once], so a
process that dies while the tool runs does not leave the next process to run it again.

What the foreign run said and did, as its library holds it (prompts, replies, tool calls and their results, a
graph's state), is written beside the state as the run's transcript ([`Step`][tarry.bridges.Step]s under
``provider_data["transcript"]``) each time it parks or finishes, so the inbox and ``tarry show`` read it
without the library ([`transcript_of`][tarry.bridges.transcript_of]).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from tarry.agents import Agent
from tarry.carrying import interrupted_message
from tarry.chat import Chat
from tarry.errors import BridgeError, CorruptStateError
from tarry.live import current_turn
from tarry.messages import Message, ModelRequest, ToolCall
from tarry.policies import Approval
from tarry.store import Store
from tarry.store.schedule import wake
from tarry.tools import Tool

APPROVED: dict[str, Any] = {"approved": True}
"""A stand-in's result once a person approved its call: the framework runs the call itself."""

ANYONE = Approval()
"""The default policy of a stand-in's calls: one person, anyone."""

TRANSCRIPT = "transcript"
"""Where a bridged chat's assistant message keeps the run's transcript (``provider_data``), as JSON steps."""

Outcome = Literal["approved", "declined", "given"]
"""What came of a parked call: approved, declined (or lapsed, or cancelled), or given a person's result."""


@dataclass(frozen=True)
class Decided:
    """What a person decided of one parked call, as the chat's tool result for it says.

    ``outcome`` is ``"approved"`` (the framework runs the call's tool as its run goes on), ``"declined"``
    (declined, lapsed or cancelled: ``message`` is the decline's note if there was one, else tarry's reason) or
    ``"given"`` (``result`` is what the person gave in place of running the call, with
    [`respond`][tarry.store.Store.respond]).
    """

    call: ToolCall
    outcome: Outcome
    message: str = ""
    result: Any = None


@dataclass(frozen=True)
class Step:
    """One step of a bridged run's transcript, as its library holds it, in words a person reads.

    ``role`` is ``"user"`` (a prompt), ``"assistant"`` (the model's text), ``"call"`` (a tool call, its
    name and arguments), ``"result"`` (what a call returned, or why it failed), ``"system"`` (instructions)
    or ``"state"`` (a graph's state, as JSON).
    """

    role: str
    text: str

    def to_json(self) -> dict[str, str]:
        """``{"role": ..., "text": ...}``."""
        return {"role": self.role, "text": self.text}


def transcript_of(message: Message) -> tuple[Step, ...]:
    """The run's transcript a bridged chat's assistant message holds (none for any other message)."""
    data = (message.provider_data or {}).get(TRANSCRIPT)
    if not isinstance(data, list):
        return ()
    return tuple(
        Step(str(step.get("role", "")), str(step.get("text", ""))) for step in data if isinstance(step, Mapping)
    )


def new_steps(messages: Sequence[Message]) -> list[tuple[Step, ...]]:
    """For each of ``messages``, the steps of its run's transcript that no message before it told: a bridged chat's
    transcript as a person reads it, each step once.

    A message's transcript that goes on from the one before shows only what the run did since; one that does not
    (a library that rewrote its history) shows whole. The chat's first user message tells the run's prompt, and
    a final reply's own text is not told twice.
    """
    told: tuple[Step, ...] = ()
    shown: list[tuple[Step, ...]] = []
    for message in messages:
        if message.role == "user" and not told:
            told = (Step("user", message.content),)
        steps = transcript_of(message)
        if not steps:
            shown.append(())
            continue
        new = steps[len(told) :] if steps[: len(told)] == told else steps
        if new and new[-1].text == message.content:
            new = new[:-1]
        shown.append(new)
        told = steps
    return shown


class StandIn(Tool):
    """Stands in, in a parked chat, for a foreign framework's tool: every call of it waits on a person's approval.

    ``requires_approval`` is an [`Approval`][tarry.approvals.Approval] policy or a function of the call
    returning one (two people, a group); ``approval_ttl`` the seconds a person has. Running an approved
    call only returns [`APPROVED`][tarry.bridges.APPROVED]: the framework runs its own tool when the
    run goes on. A person may not change a call's arguments (``editable`` is ``False``).
    """

    editable = False

    def __init__(
        self,
        name: str,
        *,
        description: str = "",
        requires_approval: Approval | Callable[[ToolCall], Approval] = ANYONE,
        approval_ttl: float | None = None,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"A stand-in needs the non-empty name of the tool it stands in for, got {name!r}")
        if approval_ttl is not None and (isinstance(approval_ttl, bool) or approval_ttl <= 0):
            raise ValueError(f"approval_ttl must be a positive number of seconds or None, got {approval_ttl!r}")
        self.name = name
        self.description = description or f"Stands in for {name}, a call of another framework that waits on a person."
        self.requires_approval = requires_approval
        self.approval_ttl = approval_ttl

    @property
    def parameters(self) -> dict[str, Any]:
        """Any object: the foreign framework checks the arguments."""
        return {"type": "object", "properties": {}}

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The arguments as the foreign model sent them."""
        return dict(arguments)

    async def execute(self, **arguments: Any) -> dict[str, Any]:
        """Say the call was approved; the foreign framework runs it when its run goes on."""
        return dict(APPROVED)


def checked_approvals(approvals: Mapping[str, Approval] | None) -> dict[str, Approval]:
    """A bridge's ``approvals`` (a policy by tool or node name), each checked to be an
    [`Approval`][tarry.approvals.Approval]: a ``TypeError`` names the one that is not."""
    policies = dict(approvals or {})
    for name, policy in policies.items():
        if not isinstance(policy, Approval):
            raise TypeError(f"approvals[{name!r}] must be an Approval, got {type(policy).__name__}")
    return policies


def parked_reply(
    key: str, state: Any, calls: Sequence[ToolCall], text: str = "", transcript: Sequence[Step] = ()
) -> Message:
    """The assistant message that parks a foreign run: its ``state`` under ``key``, the calls that wait, and the
    run's ``transcript`` so far."""
    return Message(
        "assistant", text, tool_calls=tuple(calls), provider_data={key: state, **_transcript_data(transcript)}
    )


def finished_reply(text: str, transcript: Sequence[Step] = ()) -> Message:
    """The assistant message of a foreign run's final output, ``text``, with the run's whole ``transcript``."""
    return Message("assistant", text, provider_data=_transcript_data(transcript) or None)


def _transcript_data(transcript: Sequence[Step]) -> dict[str, Any]:
    return {TRANSCRIPT: [step.to_json() for step in transcript]} if transcript else {}


class BridgeModel(ABC):
    """The model of a parked chat: it carries the foreign run on from its state and the people's decisions.

    A subclass sets ``key`` (where its state is kept in ``provider_data``) and writes
    [`carry_on`][tarry.bridges.BridgeModel.carry_on]. tarry asks it only when no call of the chat
    waits, under the chat's turn claim, so one process carries a run on at a time.
    """

    key: ClassVar[str] = ""

    @property
    def name(self) -> str:
        """``bridge:<key>``."""
        return f"bridge:{self.key}"

    async def complete(self, request: ModelRequest) -> Message:
        """Carry the run parked in ``request.messages`` on, with what people decided of its calls."""
        state, decided = read_parked(request.messages, self.key)
        return await self.carry_on(state, decided)

    @abstractmethod
    async def carry_on(self, state: Any, decided: Mapping[str, Decided]) -> Message:
        """Run the foreign agent on from ``state`` with ``decided`` (by call id); the reply that parks it again
        ([`parked_reply`][tarry.bridges.parked_reply]) or its final answer."""


def read_parked(messages: Sequence[Message], key: str) -> tuple[Any, dict[str, Decided]]:
    """The state of the run parked last in ``messages`` under ``key``, and what was decided of each of its calls."""
    for place in range(len(messages) - 1, -1, -1):
        message = messages[place]
        if message.role == "assistant" and message.provider_data is not None and key in message.provider_data:
            break
    else:
        raise CorruptStateError(f"The chat holds no run parked by the {key} bridge")
    after = messages[place + 1 :]
    if any(later.role != "tool" for later in after):
        # Running the framework on from this state again would run its approved calls again.
        raise BridgeError(
            f"The run parked by the {key} bridge has gone on already; a bridged chat takes no new message"
        )
    results = {later.tool_call_id: later for later in after}
    decided: dict[str, Decided] = {}
    for call in message.tool_calls:
        result = results.get(call.id)
        if result is None:
            raise CorruptStateError(f"The parked {call.name} call {call.id} has no result yet")
        decided[call.id] = decision_of(call, result)
    return message.provider_data[key], decided


def decision_of(call: ToolCall, result: Message) -> Decided:
    """What the tool result tarry saved for a stand-in's call says was decided."""
    data = result.result()
    if data == APPROVED:
        return Decided(call, "approved")
    if isinstance(data, dict) and data.get("approved") is True and "output" in data:
        return Decided(call, "approved", result=data["output"])  # a stand-in that ran the tool itself
    if isinstance(data, dict) and "given_by" in data:
        return Decided(call, "given", result=data.get("result"))
    if isinstance(data, dict) and "error" in data:
        return Decided(call, "declined", message=str(data.get("note") or data["error"]))
    return Decided(call, "declined", message=result.content if isinstance(data, str) else json.dumps(data))


async def run_once(
    call_id: str,
    name: str,
    run: Callable[[], Awaitable[Any]],
    *,
    as_json: Callable[[Any], Any],
    interrupted: Callable[[str], Any],
) -> Any:
    """Run the tool of decided call ``call_id`` (a call of tool ``name``) at most once, whichever processes carry
    the chat on: for a bridge whose framework runs an approved call's tool itself while its run goes on, inside
    [`carry_on`][tarry.bridges.BridgeModel.carry_on].

    Marks the run started on the call's row (a transaction of its own, before ``run()``), then runs it and
    records ``as_json(result)`` once it returns, and returns the result. When a run of the call was marked
    before (a process died while its turn ran the framework on, and this turn runs the framework on again from
    the same state), ``run`` is not called: a recorded result is returned as recorded (its JSON form), and a run
    that recorded none returns ``interrupted(message)``, ``message`` being what tarry tells a model of its own
    interrupted calls (the tool may or may not have run); ``interrupted`` may raise the framework's failure
    instead. A tool that raises records nothing (its exception goes on; a later turn finds it interrupted).
    Outside a chat's model turn it only runs ``run()``.
    """
    turn = current_turn.get()
    if turn is None:
        return await run()
    earlier = await turn.start_run(call_id)
    if earlier is not None:
        return earlier.result if earlier.finished else interrupted(interrupted_message(name))
    result = await run()
    await turn.finish_run(call_id, as_json(result))
    return result


class _AllDecided(Exception):
    """A parking chat's model was asked again: every call of the run was decided as it parked (standing grants)."""

    def __init__(self, chat_id: str) -> None:
        super().__init__(f"Every call of chat {chat_id} was decided as it parked")
        self.chat_id = chat_id


class _Once:
    """A model whose one reply is already known: the run being parked."""

    def __init__(self, reply: Message, name: str) -> None:
        self.reply: Message | None = reply
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    async def complete(self, request: ModelRequest) -> Message:
        reply, self.reply = self.reply, None
        if reply is None:
            turn = current_turn.get()
            raise _AllDecided(turn.chat_id if turn is not None else "")
        return reply


async def park(store: Store, agent: Agent, prompt: str, reply: Message) -> Chat:
    """Park a foreign run in ``store``: a new chat of ``agent`` whose user asked ``prompt`` and whose model replied
    ``reply`` ([`parked_reply`][tarry.bridges.parked_reply]). Its calls wait on their questions when it returns.

    Each call must be a stand-in of ``agent``'s: one that is not would close at once as an unknown tool. Parking
    never runs the foreign run on: when standing grants decided every call as it parked, the chat is left due,
    as a person's decision leaves it, for a worker (or [`continue_chat`][tarry.jobs.continue_chat]) to carry on,
    and returned as loaded with the agent's model.
    """
    names = {tool.name for tool in agent.tools if isinstance(tool, Tool)}
    unknown = sorted({call.name for call in reply.tool_calls} - names)
    if unknown:
        raise ValueError(f"Agent {agent.name!r} has no stand-in for {', '.join(unknown)}: name them in its tools")
    try:
        return await store.start_chat(prompt, model=_Once(reply, f"parking:{agent.name}"), agent=agent)
    except _AllDecided as decided:
        chat_id, postgres = decided.chat_id, not store.db.is_sqlite
    await store.db.run_write(lambda connection: wake(connection, chat_id, postgres=postgres))
    return await store.load_chat(chat_id, agent.make_model(), agent.tools, agent.instructions)
