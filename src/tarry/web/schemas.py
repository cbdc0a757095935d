"""The JSON API's bodies, as pydantic models (they make the OpenAPI schema)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from tarry.approvals import Approval, Vote
from tarry.grants import Allow, Grant
from tarry.messages import ToolCall
from tarry.principals import Channel, Principal
from tarry.questions import Question
from tarry.store.audit import AttemptOutcome, DecisionEvent, TrailAction
from tarry.store.outbox import DeliveryRecord
from tarry.store.waiting import WaitingTask


class PrincipalOut(BaseModel):
    """Who decided: a stable id and, when known, a display name."""

    id: str
    name: str | None

    @classmethod
    def of(cls, principal: Principal | None) -> PrincipalOut | None:
        """The body for ``principal``, or ``None`` (a decision made without an identity)."""
        return None if principal is None else cls(id=principal.id, name=principal.name)


class PolicyOut(BaseModel):
    """An approval's policy: how many distinct people must approve, and who may (a group the app checks)."""

    count: int
    by: str | None
    grant_suffices: bool = Field(default=False, description="Whether one standing grant approves the call alone.")
    remind_after: float | None = Field(default=None, description="Seconds after it was asked that it is reminded.")
    escalate_after: float | None = Field(default=None, description="Seconds after it was asked that it escalates.")
    escalate_to: list[str] = Field(default=[], description="Who may decide too once it escalated (principals' ids).")
    on_timeout: Literal["expire", "decline"] = Field(
        default="expire", description="What becomes of it when nobody decided before it expires."
    )

    @classmethod
    def of(cls, policy: Approval | None) -> PolicyOut | None:
        """The body for ``policy``, or ``None``."""
        if policy is None:
            return None
        remind, escalate = policy.remind_after, policy.escalate_after
        return cls(
            count=policy.count,
            by=policy.by,
            grant_suffices=policy.grant_suffices,
            remind_after=None if remind is None else remind.total_seconds(),
            escalate_after=None if escalate is None else escalate.total_seconds(),
            escalate_to=list(policy.escalate_to),
            on_timeout=policy.on_timeout,
        )


class VoteOut(BaseModel):
    """One approval counted toward a policy: who, when, and for which arguments."""

    by: PrincipalOut
    at: datetime
    digest: str | None = Field(
        description="The SHA-256 of the canonical JSON of the arguments approved (null: the model's, before votes "
        "carried one)."
    )
    arguments: dict[str, Any] | None = Field(description="The arguments approved, when the approver changed them.")
    channel: str | None = Field(default=None, description="Through what the approval came (null: not recorded).")

    @classmethod
    def of(cls, vote: Vote) -> VoteOut:
        """The body for ``vote``."""
        by = PrincipalOut.of(vote.principal)
        assert by is not None
        return cls(by=by, at=vote.at, digest=vote.digest, arguments=vote.arguments, channel=vote.channel)


class ToolCallOut(BaseModel):
    """The tool call that waits: its name and the arguments exactly as the model sent them."""

    id: str
    name: str
    arguments: dict[str, Any]

    @classmethod
    def of(cls, call: ToolCall | None) -> ToolCallOut | None:
        """The body for ``call``, or ``None``."""
        return None if call is None else cls(id=call.id, name=call.name, arguments=dict(call.arguments))


class QuestionOut(BaseModel):
    """A question, pending or decided."""

    id: str
    kind: Literal["approval", "form", "url"]
    message: str
    requested_schema: dict[str, Any] = Field(description="The fields as a JSON schema object.")
    url: str | None
    tool_call: ToolCallOut | None
    chat_id: str | None
    source: str | None = Field(description="The MCP server that asked, or null for tarry's own questions.")
    asked_at: datetime | None
    expires_at: datetime | None
    decision: Literal["accept", "decline", "cancel", "respond"] | None
    answer: dict[str, Any] | None
    note: str | None
    decided_at: datetime | None
    decided_by: PrincipalOut | None = Field(
        description="Who decided; null when undecided or decided without an identity."
    )
    channel: Channel | None = Field(
        description="Through what it was decided (`grant`: a standing grant; `policy`: its policy, on timeout)."
    )
    policy: PolicyOut | None = Field(description="The approval's policy, when its tool names one.")
    votes: list[VoteOut] = Field(description="The approvals counted so far toward the policy's count.")
    editable: dict[str, Any] | None = Field(
        description="For an approval: the JSON schema of the parameters a person may change while approving (null: "
        "none)."
    )
    proposal: dict[str, Any] | None = Field(
        description="For an approval: the arguments the call would run with as things stand (a person may have "
        "changed them)."
    )
    reminded_at: datetime | None = Field(default=None, description="When its policy reminded it, if it did.")
    escalated_at: datetime | None = Field(default=None, description="When its policy escalated it, if it did.")
    escalated_to: list[str] = Field(
        default=[], description="Who else may decide it since it escalated (principals' ids; empty before)."
    )
    proposal_digest: str | None = Field(
        default=None,
        description="For an approval: the digest of `proposal`; send it back as the approval's `seen` to approve "
        "only those arguments.",
    )

    @classmethod
    def of(cls, question: Question) -> QuestionOut:
        """The body for ``question``."""
        call = question.tool_call
        return cls(
            id=question.id,
            kind=question.kind,
            message=question.message,
            requested_schema=question.requested_schema,
            url=question.url,
            tool_call=ToolCallOut.of(call),
            chat_id=question.chat_id,
            source=question.source,
            asked_at=question.asked_at,
            expires_at=question.expires_at,
            decision=question.decision,
            answer=question.redact(question.answer),
            note=question.note,
            decided_at=question.decided_at,
            decided_by=PrincipalOut.of(question.decided_by),
            channel=question.channel,
            policy=PolicyOut.of(question.policy),
            votes=[VoteOut.of(vote) for vote in question.votes],
            editable=question.editable,
            proposal=question.proposal,
            reminded_at=question.reminded_at,
            escalated_at=question.escalated_at,
            escalated_to=list(question.escalated_to),
            proposal_digest=question.proposal_digest,
        )


class DecisionOut(BaseModel):
    """A decision this request recorded."""

    recorded: Literal[True] = True
    question: QuestionOut


class TurnOut(BaseModel):
    """A chat's whole turn this request approved: every question its waiting calls waited on (none when none
    waited)."""

    recorded: Literal[True] = True
    questions: list[QuestionOut]


class DeclineIn(BaseModel):
    """An optional note for the model about why the call was declined."""

    model_config = ConfigDict(extra="ignore")
    note: str | None = Field(default=None, max_length=10_000)


class AllowIn(BaseModel):
    """A standing grant to make along with an approval: the call's tool, in the question's scope."""

    model_config = ConfigDict(extra="forbid")

    scope: Literal["chat", "agent", "everywhere"] = Field(
        default="chat", description="The question's chat, that chat's agent's chats, or every chat."
    )
    equal: dict[str, Any] = Field(default_factory=dict, description="Arguments that must equal these values.")
    within: dict[str, tuple[float | None, float | None]] = Field(
        default_factory=dict, description="Arguments that must be numbers within `[min, max]` (`null`: open)."
    )
    ttl: float | None = Field(default=None, gt=0, description="Seconds until the grant ends (`null`: until revoked).")

    def to_allow(self) -> Allow:
        """The [`Allow`][tarry.grants.Allow] this body says; ``ValueError`` for bad constraints."""
        return Allow(self.scope, equal=self.equal, within=self.within, ttl=self.ttl)


class ApproveIn(BaseModel):
    """Optional changes to the call's arguments, approved with it, and an optional standing grant to make in the
    approval's transaction ("approve, and allow")."""

    model_config = ConfigDict(extra="forbid")
    arguments: dict[str, Any] | None = Field(
        default=None,
        description="Parameter names to new values, applied to the arguments the question proposes; each is "
        "checked against the question's editable schema.",
    )
    allow: AllowIn | None = Field(default=None, description="The grant to make along with the approval.")
    seen: str | None = Field(
        default=None,
        description="The `proposal_digest` of the question as you were shown it: if its arguments changed since "
        "(another person approved them changed), nothing is recorded and the answer is 409, saying what they are "
        "now. Without it, the approval is for the arguments proposed when it is recorded.",
    )


class RespondIn(BaseModel):
    """The result of the call, given by a person in place of running its tool."""

    model_config = ConfigDict(extra="forbid")
    result: Any = Field(description="Any JSON value (text is the common case); the model reads it as a person's.")
    seen: str | None = Field(
        default=None,
        description="The `proposal_digest` of the question as you were shown it: if the call's arguments changed "
        "since, nothing is recorded and the answer is 409.",
    )


class ApproveAllIn(BaseModel):
    """What the person was shown of the turn they approve whole."""

    model_config = ConfigDict(extra="forbid")
    seen: dict[str, str] | None = Field(
        default=None,
        description="Each question shown, by id, with its `proposal_digest` as shown: if one's arguments changed "
        "since, or a question of the turn is not among them (asked since), nothing is recorded and the answer is "
        "409 naming it. Without it, every question is approved as it stands when the turn is recorded.",
    )


class TaskOut(BaseModel):
    """A paused task: work that finishes later."""

    chat_id: str
    tool_call: ToolCallOut | None
    status: str
    status_message: str | None
    poll_interval: float | None = Field(description="Seconds between checks the task asks for.")
    since: datetime = Field(description="When the call was recorded; the task has waited since about then.")
    next_check: datetime | None = Field(description="When a background worker next looks at the chat, if scheduled.")

    @classmethod
    def of(cls, waiting: WaitingTask) -> TaskOut:
        """The body for a waiting task."""
        task, call = waiting.task, waiting.task.tool_call
        return cls(
            chat_id=waiting.chat_id,
            tool_call=ToolCallOut.of(call),
            status=task.status,
            status_message=task.status_message,
            poll_interval=task.poll_interval,
            since=waiting.since,
            next_check=waiting.next_check,
        )


class DecisionEventOut(BaseModel):
    """One attempt to decide a question, from the audit trail."""

    id: int = Field(description="The event's number; pass it as `after` to read the events that follow.")
    at: datetime
    chat_id: str
    question_id: str
    kind: Literal["approval", "form", "url"]
    message: str = Field(description="The question as it was shown.")
    tool_call: ToolCallOut | None
    decision: TrailAction = Field(
        description="The decision tried, or what the question's approval policy did: `remind`, `escalate`."
    )
    outcome: AttemptOutcome
    answer: dict[str, Any] | None = Field(description="The answer's values; a secret field's value reads [secret].")
    note: str | None
    by: PrincipalOut | None
    channel: Channel
    detail: str | None = Field(
        description="What stopped an attempt that did not decide; `grant <id>` first when a standing grant tried."
    )

    @classmethod
    def of(cls, event: DecisionEvent) -> DecisionEventOut:
        """The body for ``event``."""
        call = None
        if event.call_id is not None and event.tool is not None:
            call = ToolCallOut(id=event.call_id, name=event.tool, arguments=event.arguments or {})
        return cls(
            id=event.id,
            at=event.at,
            chat_id=event.chat_id,
            question_id=event.question_id,
            kind=event.kind,
            message=event.message,
            tool_call=call,
            decision=event.decision,
            outcome=event.outcome,
            answer=event.answer,
            note=event.note,
            by=PrincipalOut.of(event.by),
            channel=event.channel,
            detail=event.detail,
        )


class ConstraintOut(BaseModel):
    """A condition a grant sets on one argument: equal to ``equal``, or a number within ``min`` and ``max``."""

    name: str
    equal: Any = None
    min: float | None = None
    max: float | None = None


class GrantOut(BaseModel):
    """A standing grant: calls of ``tool`` that meet its constraints, in its scope, are approved at once."""

    id: str
    tool: str
    constraints: list[ConstraintOut]
    chat_id: str | None = Field(description="Only this chat's calls (`null`: see `agent`).")
    agent: str | None = Field(description="Only the calls of chats made from this agent (`null` with no chat: all).")
    scope: str = Field(description="The scope in words: `chat <id>`, `agent <name>` or `everywhere`.")
    granted_by: PrincipalOut
    granted_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    revoked_by: PrincipalOut | None
    question_id: str | None = Field(description="The decision the grant was made with, if any.")

    @classmethod
    def of(cls, grant: Grant) -> GrantOut:
        """The body for ``grant``."""
        return cls.model_validate(grant.to_dict())


class GrantIn(BaseModel):
    """A standing grant to make, as whoever sends the request."""

    model_config = ConfigDict(extra="forbid")

    tool: str = Field(min_length=1, max_length=200, description="The tool whose calls it approves.")
    chat_id: str | None = Field(default=None, max_length=200, description="Only this chat's calls.")
    agent: str | None = Field(default=None, max_length=200, description="Only the calls of this agent's chats.")
    equal: dict[str, Any] = Field(default_factory=dict, description="Arguments that must equal these values.")
    within: dict[str, tuple[float | None, float | None]] = Field(
        default_factory=dict, description="Arguments that must be numbers within `[min, max]` (`null`: open)."
    )
    ttl: float | None = Field(default=None, gt=0, description="Seconds until the grant ends (`null`: until revoked).")


class DeliveryOut(BaseModel):
    """One delivery of a notice of an event on a question, through one channel, and how its attempts went."""

    id: str = Field(description="The same on every attempt: a webhook's `webhook-id`.")
    notice_id: str
    event: Literal["asked", "reminded", "escalated", "decided", "expired", "cancelled"]
    question_id: str
    chat_id: str
    channel: str = Field(description="The channel's name: `webhook`, `email`, `slack`, or the application's own.")
    recipient: PrincipalOut | None = Field(description="Whom it tells; `null` for an endpoint (a webhook).")
    address: str | None
    state: Literal["pending", "sent", "failed"] = Field(
        description="`failed`: its attempts ran out; it is kept, with its last error, until retried."
    )
    attempts: int = Field(description="Attempts made since it was made, or since it was last retried.")
    next_attempt_at: datetime
    last_error: str | None
    sent_at: datetime | None
    created_at: datetime

    @classmethod
    def of(cls, delivery: DeliveryRecord) -> DeliveryOut:
        """The body for ``delivery``."""
        return cls.model_validate(delivery.to_dict())
