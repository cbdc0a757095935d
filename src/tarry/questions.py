"""Questions a chat waits on a person to answer, and how an answer to all of a question's fields is checked."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, replace
from datetime import datetime
from typing import Any, Literal

from tarry.errors import InvalidAnswerError, TarryError
from tarry.fields import FIELD_TYPES, FORMATS, Field, FieldType, fields_from_schema
from tarry.messages import ToolCall
from tarry.policies import Approval, Vote
from tarry.principals import Channel, Principal
from tarry.text import unstorable

__all__ = [
    "DECISIONS",
    "FIELD_TYPES",
    "FORMATS",
    "QUESTION_KINDS",
    "AnswerNeeded",
    "Decision",
    "Field",
    "FieldType",
    "Question",
    "QuestionKind",
    "Verdict",
    "digest_of",
    "fields_from_schema",
]

QuestionKind = Literal["approval", "form", "url"]
QUESTION_KINDS: tuple[QuestionKind, ...] = ("approval", "form", "url")
Decision = Literal["accept", "decline", "cancel", "respond"]
DECISIONS: tuple[Decision, ...] = ("accept", "decline", "cancel", "respond")
SECRET = "[secret]"
"""What the audit trail holds in place of a secret field's value."""


@dataclass(frozen=True)
class Verdict:
    """What was decided on a question: the decision, what it recorded, when, by whom and through what.

    A value, like the question that holds it: a decision recorded later is another question
    holding another verdict, never this one changed.
    """

    decision: Decision
    """``"accept"``, ``"decline"``, ``"cancel"`` or ``"respond"``."""
    at: datetime
    """When the decision was recorded."""
    answer: dict[str, Any] | None = None
    """An accepted question's values (an approval's is empty); ``None`` for a decline or a cancel."""
    note: str | None = None
    """The note a person gave with a decline (or why it was cancelled), if any."""
    by: Principal | None = None
    """Who decided, when they said; ``None`` for a decision made without an identity."""
    channel: Channel | None = None
    """Through what the decision came: one of ``tarry.principals.CHANNELS``."""

    def __post_init__(self) -> None:
        if self.decision not in DECISIONS:
            raise ValueError(f"A verdict's decision must be one of {', '.join(DECISIONS)}; got {self.decision!r}")
        if not isinstance(self.at, datetime):
            raise TypeError(f"A verdict's at must be a datetime, got {type(self.at).__name__}")


@dataclass(frozen=True, eq=False)
class Question:
    """Something a chat waits on a person for: an approval, a form, or a URL to visit.

    A value: recording it, deciding it or counting an approval of it makes another question
    (``dataclasses.replace``), and assigning to one raises ``FrozenInstanceError``. The ``id``
    is minted when the question is recorded and never reused. ``verdict`` is ``None`` until
    someone decides; ``decision``, ``answer``, ``note``, ``decided_at``, ``decided_by`` and
    ``channel`` read it: ``"accept"`` (with ``answer``, the accepted values), ``"decline"``
    (with an optional ``note``), ``"cancel"``, or ``"respond"`` (an approval answered with the call's
    result, given by a person in place of running the tool: ``answer`` is ``{"result": value}``).
    """

    id: str
    kind: QuestionKind
    message: str
    fields: tuple[Field, ...] = ()
    url: str | None = None
    tool_call: ToolCall | None = None
    expires_at: datetime | None = None
    asked_at: datetime | None = None
    chat_id: str | None = None
    verdict: Verdict | None = None
    """What was decided, once someone decided; ``None`` until then."""
    source: str | None = None
    """Who asked: ``None`` for tarry's approvals and tools' own questions, the MCP server's name otherwise."""
    key: str | None = None
    """The protocol's name for this question (an MCP input request key), when it has one."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Protocol state that travels with the question (kept verbatim, never shown; the question's own copy)."""
    ttl: float | None = None
    """Seconds the question stays open once recorded; the chat sets ``expires_at`` from it."""
    policy: Approval | None = None
    """An approval's policy (who may decide, how many must approve), when its tool names one."""
    votes: tuple[Vote, ...] = ()
    """The approvals counted so far toward ``policy.count``, while more are needed (and after)."""
    awaited: bool = False
    """Asked by its call's running tool code, which waits on it: a person may decline it while the call runs."""
    after: str | None = None
    """The id of the question the same run of its call's tool asked before this one (``None`` for the run's first, and
    for a question no running tool code asked)."""
    messages_said: int | None = None
    """For a question of the chat itself (a login): how many messages the chat held when it asked. Once a person
    declines or cancels it, the chat stays stopped until the user says something after them."""
    editable: dict[str, Any] | None = None
    """For an approval: the JSON schema of the call's parameters a person may change while approving (``None``: its
    tool allows no change). See [`tarry.edits`][tarry.edits]."""
    changed_arguments: dict[str, Any] | None = None
    """For an approval asked again because a person changed the call's arguments and its tool's policy asks more of
    the call as changed: those arguments, which it proposes (``None`` for any other question)."""
    reminded_at: datetime | None = None
    """When its policy's reminder was recorded (``Approval.remind_after``), if it was."""
    escalated_at: datetime | None = None
    """When its policy escalated it (``Approval.escalate_after``), if it did: from then on the principals its policy's
    ``escalate_to`` names may decide it too."""

    def __post_init__(self) -> None:
        if self.kind not in QUESTION_KINDS:
            raise ValueError(f"Question kind must be one of {', '.join(QUESTION_KINDS)}; got {self.kind!r}")
        object.__setattr__(self, "fields", tuple(self.fields))
        object.__setattr__(self, "votes", tuple(self.votes))
        object.__setattr__(self, "extra", dict(self.extra))
        names = [item.name for item in self.fields]
        if None in names or len(set(names)) != len(names):
            raise ValueError(f"Question fields need unique names, got {names!r}")
        if self.kind == "url" and not self.url:
            raise ValueError("A URL question needs a url")
        if self.kind != "form" and self.fields:
            raise ValueError(f"A {self.kind} question has no fields")

    @classmethod
    def restored(cls, **values: Any) -> Question:
        """The question a store recorded, from its recorded ``values``, built without the checks of ``__init__``.

        For storage adapters reading their own rows, which hold only questions that passed those checks when they
        were recorded; ``values`` name fields (any left out take their defaults), ``fields`` and ``votes`` as
        tuples and ``extra`` as a dict the question may keep. Anything else builds a question the usual way.
        """
        question = object.__new__(cls)
        question.__dict__.update({**_RESTORED_DEFAULTS, "extra": {}, **values})
        return question

    @property
    def decision(self) -> Decision | None:
        """The verdict's decision, or ``None`` while nobody decided."""
        return None if self.verdict is None else self.verdict.decision

    @property
    def answer(self) -> dict[str, Any] | None:
        """The accepted values (empty for an approval), or ``None``: undecided, declined or cancelled."""
        return None if self.verdict is None else self.verdict.answer

    @property
    def note(self) -> str | None:
        """The note given with the decision, if any."""
        return None if self.verdict is None else self.verdict.note

    @property
    def decided_at(self) -> datetime | None:
        """When the decision was recorded, or ``None`` while nobody decided."""
        return None if self.verdict is None else self.verdict.at

    @property
    def decided_by(self) -> Principal | None:
        """Who made the decision, when they said (``by=``); ``None`` for a decision made without an identity."""
        return None if self.verdict is None else self.verdict.by

    @property
    def escalated_to(self) -> tuple[str, ...]:
        """The ids of the principals its policy admitted when it escalated (none before it escalated)."""
        if self.escalated_at is None or self.policy is None:
            return ()
        return self.policy.escalate_to

    @property
    def channel(self) -> Channel | None:
        """Through what the decision came: one of ``tarry.principals.CHANNELS``."""
        return None if self.verdict is None else self.verdict.channel

    @property
    def decided(self) -> bool:
        """True once someone decided the question."""
        return self.decision is not None

    def expired(self, now: datetime) -> bool:
        """True when nobody decided the question before its time to live ran out."""
        return self.decision is None and self.expires_at is not None and now >= self.expires_at

    def is_open(self, now: datetime) -> bool:
        """True while an answer may still come: nobody decided the question and its time to live has not run out."""
        return self.decision is None and not self.expired(now)

    @property
    def proposal(self) -> dict[str, Any] | None:
        """For a call's approval, the arguments it would run with as things stand: those the decision recorded, else
        the latest approval's (a person may have changed them), else those it was asked again for
        (``changed_arguments``), else the model's; ``None`` for other questions."""
        if self.tool_call is None or self.kind != "approval":
            return None
        if self.answer is not None and isinstance(self.answer.get("arguments"), Mapping):
            return dict(self.answer["arguments"])
        if self.votes and self.votes[-1].arguments is not None:
            return dict(self.votes[-1].arguments)
        if self.changed_arguments is not None and not self.votes:
            return dict(self.changed_arguments)
        return dict(self.tool_call.arguments)

    @property
    def proposal_digest(self) -> str | None:
        """The digest ([`arguments_digest`][tarry.edits.arguments_digest]) of [`proposal`][tarry.Question.proposal]:
        what an approval passes as ``seen`` to be recorded only while the question still proposes those arguments;
        ``None`` for other questions."""
        proposal = self.proposal
        return None if proposal is None else digest_of(proposal)

    @property
    def requested_schema(self) -> dict[str, Any]:
        """The question's fields as a JSON schema object, as an MCP elicitation carries them."""
        return {
            "type": "object",
            "properties": {item.name: item.to_schema() for item in self.fields},
            "required": [item.name for item in self.fields if item.required],
        }

    def check_answer(self, value: Any = None, values: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The values an answer records, after dropping unasked fields and filling defaults.

        A positional ``value`` answers a one-field question (or, as a dict, names fields like
        ``values``). Raises [`InvalidAnswerError`][tarry.errors.InvalidAnswerError] naming each field that is wrong.
        """
        given = self._given_values(value, values)
        accepted: dict[str, Any] = {}
        errors: dict[str, str] = {}
        for item in self.fields:
            assert item.name is not None
            raw = given.get(item.name)
            if raw is None or raw == "" or raw == []:
                if item.default is not None:
                    accepted[item.name] = item.default
                elif item.required:
                    errors[item.name] = "a value is required"
                continue
            try:
                accepted[item.name] = item.check(raw)
            except ValueError as error:
                errors[item.name] = str(error)
        if errors:
            raise InvalidAnswerError(errors)
        return accepted

    def _given_values(self, value: Any, values: Mapping[str, Any] | None) -> dict[str, Any]:
        """The answer's values by field name, ``value`` put under the name it stands for."""
        given = dict(values or {})
        if isinstance(value, Mapping):
            return {**value, **given}
        if value is not None:
            if len(self.fields) != 1:
                what = "an approval" if self.kind == "approval" else f"a question with {len(self.fields)} fields"
                raise InvalidAnswerError({"value": f"{what} takes no single value; name the fields"})
            name = self.fields[0].name
            assert name is not None
            given[name] = value
        return given

    def decided_with(self, verdict: Verdict) -> Question:
        """This question, decided as ``verdict`` says."""
        return replace(self, verdict=verdict)

    def with_vote(self, vote: Vote) -> Question:
        """This question with one more approval counted toward its policy."""
        return replace(self, votes=(*self.votes, vote))

    def redact(self, answer: Mapping[str, Any] | None) -> dict[str, Any] | None:
        """``answer`` with each secret field's value replaced by ``SECRET``, for the trail and for logs."""
        if answer is None:
            return None
        secret = {item.name for item in self.fields if item.secret}
        return {name: SECRET if name in secret else value for name, value in answer.items()}

    def to_dict(self) -> dict[str, Any]:
        """The question as JSON-safe data (times as ISO 8601 text; secret answer values left out)."""
        return {
            "id": self.id,
            "kind": self.kind,
            "message": self.message,
            "requested_schema": self.requested_schema,
            "url": self.url,
            "tool_call": None
            if self.tool_call is None
            else {
                "id": self.tool_call.id,
                "name": self.tool_call.name,
                "arguments": dict(self.tool_call.arguments),
            },
            "expires_at": _iso(self.expires_at),
            "asked_at": _iso(self.asked_at),
            "chat_id": self.chat_id,
            "decision": self.decision,
            "answer": self.redact(self.answer),
            "note": self.note,
            "decided_at": _iso(self.decided_at),
            "decided_by": None if self.decided_by is None else self.decided_by.to_dict(),
            "channel": self.channel,
            "policy": None if self.policy is None else self.policy.to_dict(),
            "votes": [vote.to_dict() for vote in self.votes],
            "source": self.source,
            "editable": self.editable,
            "proposal": self.proposal,
            "reminded_at": _iso(self.reminded_at),
            "escalated_at": _iso(self.escalated_at),
            "escalated_to": list(self.escalated_to),
            "proposal_digest": self.proposal_digest,
        }


def digest_of(arguments: Mapping[str, Any]) -> str:
    """The SHA-256 of ``arguments`` as canonical JSON (keys sorted, no spaces), in hex
    ([`arguments_digest`][tarry.edits.arguments_digest] is its public name)."""
    text = json.dumps(dict(arguments), sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


_RESTORED_DEFAULTS = {item.name: item.default for item in dataclasses.fields(Question) if item.default is not MISSING}


def check_note(note: object) -> str | None:
    """A decline's note as given, once it is text a database can hold (or ``None``).

    Raises ``TypeError`` for one that is not text, and [`InvalidAnswerError`][tarry.errors.InvalidAnswerError] (a
    ``ValueError``) under ``"note"`` for text holding NUL characters or a lone surrogate.
    """
    if note is not None and not isinstance(note, str):
        raise TypeError(f"A decline note must be str or None, got {type(note).__name__}")
    held = None if note is None else unstorable(note)
    if held is not None:
        raise InvalidAnswerError({"note": f"a decline note cannot hold {held}"})
    return note


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


class AnswerNeeded(TarryError):
    """A tool source cannot give its tools until a person answers ``question`` (an MCP server's login).

    Raised where no tool call exists yet to wait on it. A stored chat catches it and parks on
    ``question`` as a question of the chat itself (``question.tool_call`` is ``None``); the
    next ``complete()`` after its decision tries again. An in-memory chat lets it propagate.
    """

    def __init__(self, message: str, question: Question) -> None:
        super().__init__(message)
        self.question = question
        """The question to ask; the chat mints its id when it records it."""
