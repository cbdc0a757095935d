"""Recording a decision on a question: one transaction under the question's row lock.

Every decision goes through ``decide_question``, whether it comes from a chat object
(``Chat.answer`` through the store's journal) or from the store by id (``Store.answer``), so
the checks, the row lock and what a decision changes live in one place, like ``claim_call``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any, Literal

from sqlalchemy import (
    CTE,
    ColumnElement,
    Connection,
    Executable,
    String,
    Update,
    and_,
    any_,
    bindparam,
    case,
    exists,
    func,
    or_,
    select,
    update,
)
from sqlalchemy.dialects import postgresql

from tarry.approvals import MayDecide, judge
from tarry.clock import moved, utcnow
from tarry.decision_rules import Facts, first_stop
from tarry.decisions import check_respondable
from tarry.edits import recorded_answer, vote_for
from tarry.errors import InvalidAnswerError, NotAllowedError, TarryError, UnknownQuestionError
from tarry.principals import Channel, Principal
from tarry.questions import Decision, Question, Verdict
from tarry.store.audit import (
    INSERT_EVENT_BOUND,
    AttemptOutcome,
    append_event,
    attempt_columns,
    attempt_values,
    insert_event_from,
    insert_event_of_decided,
    record_attempt,
    with_its_call,
)
from tarry.store.cursor import Sendable, fetch_all, fetch_one
from tarry.store.decision_sql import SEEN, passes
from tarry.store.moment import NOW, UNTIL, lease_values
from tarry.store.rows import Row, decider_values, question_and_call_from_row
from tarry.store.schedule import NOTIFIED, WAKE, WAKE_NOTIFY, wake_of, wake_where
from tarry.store.tables import UNDECIDED_BY_KEY, chats, constant, questions, tool_calls

AnswerOf = Callable[[Question], dict[str, Any] | None]
"""Checks an answer against the question as stored and returns the values to record (raises when invalid)."""

_CALL_COLUMNS = ("call_id", "name", "arguments", "claimed_by", "claimed_until", "result_message_id")
"""The columns of a question's call that reading the question reads too."""
_QUESTION = (
    select(questions, *(tool_calls.c[name] for name in _CALL_COLUMNS), tool_calls.c.needs_approval)
    .outerjoin(tool_calls, questions.c.tool_call_id == tool_calls.c.id)  # a chat's own question has no call
    .where(questions.c.id == bindparam("question_id"))
)
_QUESTION_NOW = _QUESTION.add_columns(NOW.label("now"))
"""The question with its call, and the time by the lease clock, to judge whether the call runs and the question
expired (parameters of ``lease_values``)."""
LOCKED_QUESTION = _QUESTION_NOW.with_for_update(of=questions, key_share=True)
"""The question with its call and the time by the lease clock, its row locked (``FOR NO KEY UPDATE``)."""


@dataclass(frozen=True)
class Attempt:
    """One attempt to decide a question: the decision, the check of its answer, a note, who decides, through what,
    the standing grant that decides (``grant``, its id; the channel is then ``grant``), and the digest of the
    arguments the decider saw (``seen``; ``None``: not said)."""

    question_id: str
    decision: Decision
    answer_of: AnswerOf
    note: str | None
    by: Principal | None
    channel: Channel
    grant: str | None = None
    seen: str | None = None

    def detail(self, reason: str | None = None) -> str | None:
        """What the trail's row says beside the outcome: ``reason``, and the grant that decided, if one did."""
        if self.grant is None:
            return reason
        return f"grant {self.grant}" if reason is None else f"grant {self.grant}: {reason}"


@dataclass(frozen=True)
class ClaimAlong:
    """A claim of the decided question's call for ``owner`` until ``until``, taken by the decision's own statement
    when the decision frees the call: the call is at ``version`` (the row version the deciding chat read), nobody
    holds it, it waits on no other question, and its chat is at ``chat_version`` (the version the chat holds)."""

    row_id: int
    version: int
    chat_version: int
    owner: str
    until: datetime
    """By this process's clock, for its own bookkeeping; the statement writes the lease by the lease clock."""
    lease: timedelta


@dataclass
class Settled:
    """What an attempt to decide came to, once its transaction committed.

    ``question`` is the question as this attempt left it (decided, or with one more approval
    counted) or ``None`` when another decision came first; ``refusal`` is the error to raise
    now that the attempt is on the trail (expired, running, not allowed).
    """

    question: Question | None = None
    refusal: TarryError | None = None
    versions: tuple[int, int | None] | None = None
    """The chat's and the call's versions after a recorded decision (``None`` if none was recorded;
    the call's is ``None`` for a chat's own question, which has no call)."""
    claimed: bool = False
    """Whether the decision's statement also claimed the question's call (``ClaimAlong``)."""


def _checked_answer(attempt: Attempt, question: Question, row: Row | None) -> dict[str, Any] | None:
    """The attempt's answer, validated against the question as stored: an invalid one raises and nothing is
    written, except for a question decided already, which the attempt lost whatever it said (``None``).

    A response (``respond``) to a question ``row`` shows is no call's approval raises whatever its state, writing
    nothing (without ``row``, the chat that holds the question checked it against its call's record).
    """
    if attempt.decision == "respond" and row is not None:
        # The call's own approval is its question number 0, asked because the call needs approval, or one asked
        # again of the call as a person changed it (which proposes the changed arguments).
        own = row["number"] == 0 or question.changed_arguments is not None
        check_respondable(question, call_approval=own and bool(row["needs_approval"]))
    try:
        return attempt.answer_of(question)
    except InvalidAnswerError:
        if question.decision is None:
            raise
        return None


def decide_question(
    connection: Connection,
    attempt: Attempt,
    may_decide: MayDecide | None,
    *,
    postgres: bool,
    claim: ClaimAlong | None = None,
) -> Settled:
    """Record a decision under the row lock, checked by [`RULES`][tarry.decision_rules.RULES] in order, and append
    the attempt to the trail.

    Unknown id ([`UnknownQuestionError`][tarry.errors.UnknownQuestionError], raised: nothing to record), then the answer
    (``answer_of`` validates it against the question as stored; raised, nothing written, unless the
    question is decided already: then whatever the answer said, the attempt lost), then the rules:
    decided already (lost), expired ([`QuestionExpiredError`][tarry.errors.QuestionExpiredError]), the call ended
    (lost), declining a running call ([`ToolCallRunningError`][tarry.errors.ToolCallRunningError]), then the approval
    policy ([`judge`][tarry.approvals.judge]: [`NotAllowedError`][tarry.errors.NotAllowedError], or one approval
    counted). Every outcome after the answer's check is appended to the trail in this transaction, and the
    refusals are returned to raise after the commit. A recorded decision bumps the call's
    version (a process that read the call must read it again) and wakes the chat. With ``claim`` (SQLite: an
    approval from the chat that carries the call on next) the transaction also claims the call when the decision
    frees it and it stands as ``claim`` says; ``claimed`` tells.
    """
    decision, by = attempt.decision, attempt.by
    row, question, running, closed = read_question(connection, LOCKED_QUESTION, attempt.question_id)
    now: datetime = row["now"]  # the lease clock's: the database's on PostgreSQL
    answer = _checked_answer(attempt, question, row)
    trail = partial(
        record_attempt, connection, question, decision, at=now, by=by, channel=attempt.channel, note=attempt.note
    )
    facts = Facts(question, decision, running=running, closed=closed, now=now, seen=attempt.seen)
    rule = first_stop(facts)
    if rule is not None and rule.outcome == "lost":
        trail("lost", answer=answer, detail=attempt.detail(_why_lost(question)))
        return Settled()
    refusal: TarryError | None = None
    outcome: AttemptOutcome = "refused"
    if rule is not None and rule.error is not None:  # expired, declining a running call, or arguments changed
        refusal, outcome = rule.error(facts), _REFUSED.get(rule.outcome, "refused")
    else:  # no rule stopped it, or only its approval policy is left to apply
        try:
            verdict = judge(question, decision, by, may_decide, answer, through_grant=attempt.grant is not None)
        except NotAllowedError as error:
            refusal = error
    if refusal is not None:
        trail(outcome, answer=answer, detail=attempt.detail(str(refusal)))
        return Settled(refusal=refusal)
    if decision == "accept":  # the arguments approved: as changed, or as the question proposes them now
        if question.policy is not None and by is not None:
            question = question.with_vote(vote_for(question, by, now, answer, attempt.channel))
        answer = recorded_answer(question, answer)
    if verdict == "count":
        votes = {"votes": _votes(question), "digest": question.proposal_digest}
        connection.execute(update(questions).where(questions.c.id == question.id).values(votes))
        assert question.policy is not None
        counted = f"{len(question.votes)} of {question.policy.count} approvals"
        trail("counted", answer=answer, detail=attempt.detail(counted))
        return Settled(question)
    values = _decision_values(question, row["tool_call_id"], attempt, answer, now, _votes(question))
    settled = _record(connection, question, attempt, answer, values, postgres=postgres)
    if claim is not None:
        settled.claimed = _claim_freed_call(connection, claim, question.id)
    return settled


def _claim_freed_call(connection: Connection, claim: ClaimAlong, question_id: str) -> bool:
    """Take ``claim`` in the transaction of the decision of question ``question_id``, when the decision freed the call
    and it stands as ``claim`` says; whether it did."""
    values = {"read_version": claim.version, "held_version": claim.chat_version, "owner": claim.owner}
    values |= {"call_row": claim.row_id, "question_id": question_id, **lease_values(claim.lease)}
    return connection.execute(_CLAIM_FREED_CALL, values).rowcount == 1


def record_decision(
    connection: Connection, question: Question, attempt: Attempt, call_row: int | None, now: datetime, *, postgres: bool
) -> Settled:
    """Write a decision no surface made, under the row lock the caller holds (an approval policy's decline on
    timeout): as a decision the rules allowed is written, with no answer."""
    values = _decision_values(question, call_row, attempt, None, now, _votes(question))
    return _record(connection, question, attempt, None, values, postgres=postgres)


_REFUSED: dict[str, AttemptOutcome] = {"expired": "expired", "running": "running"}
"""What the trail says of an attempt a rule refused, by the rule's outcome (any other: ``refused``)."""


def _votes(question: Question) -> list[dict[str, Any]] | None:
    """The question's votes as its row holds them (``None`` for none)."""
    return [vote.to_dict() for vote in question.votes] or None


def _record(
    connection: Connection,
    question: Question,
    attempt: Attempt,
    answer: dict[str, Any] | None,
    values: dict[str, Any],
    *,
    postgres: bool,
) -> Settled:
    """Write a decision the locked path allowed: on the question, the call's version, the wake and the trail."""
    if postgres:  # one statement: the decision, the call's version, the wake and the trail's row
        done = connection.execute(_DECIDE_AT_ONCE, values).one()
        decided, call_version, chat_version = done.decided, done.call_version, done.chat_version
    else:
        decided = connection.execute(_DECIDE, values).rowcount
        call_version = connection.scalar(_BUMP_CALL, values)
        chat_version = connection.scalar(WAKE, values)
        append_event(connection, {key[6:]: value for key, value in values.items() if key[:6] == "event_"})
    if decided != 1:  # the row lock makes this unreachable; kept so a decision can never be written twice
        raise RuntimeError(f"Question {question.id} was decided while this process held its row lock")
    return _settled(question, attempt, answer, values["now"], call_version, chat_version)


def decide_if_open(
    connection: Sendable, attempt: Attempt, known: Question | None = None, claim: ClaimAlong | None = None
) -> Settled | None:
    """PostgreSQL, the common case, without a transaction: read the question, then record the decision in one
    statement that writes only if the question is still open (each statement commits by itself).

    The common case is a decision no rule of [`RULES`][tarry.decision_rules.RULES] stops: a question without an
    approval policy, open, with time left, whose call has not ended (and, to decline it, is not running). The
    statement checks all of that again as it writes (the question's row on its newest version, should another
    decision hold its lock), so two processes cannot both record one. With ``known`` (the question as a chat
    object holds it) there is no read: the statement's checks are the ones that count. Returns ``None``, having
    written nothing, for any other case or when the question changed in between: ``decide_question``
    then decides under the row lock and puts on the trail why the attempt came to nothing. Raises as
    ``decide_question`` does for an unknown id or an invalid answer, writing nothing.

    With ``claim`` (an approval, from the chat that will carry the call on) the statement also
    claims the call when the decision frees it and it stands as ``claim`` says; ``claimed`` tells.
    """
    now, row = utcnow(), None
    if known is None:
        row, question, running, closed = read_question(connection, _QUESTION_NOW, attempt.question_id)
        now = row["now"]
    else:
        question, running, closed = known, False, False
    answer = _checked_answer(attempt, question, row)
    facts = Facts(question, attempt.decision, running=running, closed=closed, now=now, seen=attempt.seen)
    if first_stop(facts) is not None:
        return None
    if attempt.decision == "accept":  # no policy, so no votes: the arguments approved are the answer's or the model's
        answer = recorded_answer(question, answer)
    values = _decision_values(question, None, attempt, answer, now, None)
    refuses_running = attempt.decision == "decline" and not question.awaited
    if claim is None or refuses_running:
        done = fetch_one(connection, fast_statement(attempt.decision, "known"), values)
    else:
        values |= {"read_version": claim.version, "held_version": claim.chat_version}
        values |= {"owner": claim.owner, **lease_values(claim.lease)}
        done = fetch_one(connection, fast_statement(attempt.decision, "claim"), values)
    if done is None or done["decided"] != 1:
        return None
    settled = _settled(question, attempt, answer, now, done["call_version"], done["chat_version"])
    settled.claimed = bool(done.get("claimed"))
    return settled


def decide_unread(connection: Sendable, attempt: Attempt) -> Settled | None:
    """PostgreSQL, an approval or a decline by id: the decision in one statement, the question unread.

    It decides only what needs no reading first: a question without fields (an approval records
    an empty answer) that no rule of [`RULES`][tarry.decision_rules.RULES] stops: without an approval policy,
    open, with time left, whose call has not ended and, to decline it, is not running. The statement returns the
    question it decided, with its call, to announce. Returns ``None``, having written nothing, otherwise (an
    unknown id too): ``decide_question`` then reads the question under its row lock, and raises or puts on the
    trail why the attempt came to nothing.
    """
    now = utcnow()
    answer: dict[str, Any] | None = {} if attempt.decision == "accept" else None
    by, channel, note = attempt.by, attempt.channel, attempt.note  # the answer is empty or none: nothing to redact
    event = attempt_columns(attempt.decision, "decided", at=now, by=by, channel=channel, answer=answer, note=note)
    values = _recorded(attempt, answer, now, None, event)
    row = fetch_one(connection, fast_statement(attempt.decision, "unread"), values)
    if row is None:
        return None
    question = question_and_call_from_row(row)
    return _settled(question, attempt, answer, now, row["call_version"], row["chat_version"])


def read_question(connection: Sendable, query: Executable, question_id: str) -> tuple[Row, Question, bool, bool]:
    """The question's row read by ``query``, the question, and whether its call runs (by the lease clock, whose
    time the row's ``now`` holds) and has ended.

    Raises [`UnknownQuestionError`][tarry.errors.UnknownQuestionError] for an unknown id.
    """
    row = fetch_one(connection, query, {"question_id": question_id, **lease_values()})
    if row is None:
        raise UnknownQuestionError(f"No question has the id {question_id!r}")
    question = question_and_call_from_row(row)
    running = row["claimed_by"] is not None and row["claimed_until"] is not None and row["claimed_until"] > row["now"]
    return row, question, running, row["result_message_id"] is not None


def _decision_values(
    question: Question,
    call_row: int | None,
    attempt: Attempt,
    answer: dict[str, Any] | None,
    now: datetime,
    votes: list[dict[str, Any]] | None,
) -> dict[str, Any]:
    """The parameters of a decision's statements (``call_row``: the id of the question's call's row); the
    trail's row's as ``event_<column>``.

    No key is a column's name: see ``WAKE``.
    """
    decision, by, channel, note = attempt.decision, attempt.by, attempt.channel, attempt.note
    event = attempt_values(
        question, decision, "decided", at=now, by=by, channel=channel, answer=answer, note=note, detail=attempt.detail()
    )
    return {"call_row": call_row, "woken_chat": question.chat_id, **_recorded(attempt, answer, now, votes, event)}


def _recorded(
    attempt: Attempt,
    answer: dict[str, Any] | None,
    now: datetime,
    votes: list[dict[str, Any]] | None,
    event: dict[str, Any],
) -> dict[str, Any]:
    """The parameters of what a decision records on the question, and of the trail's row (``event``) as
    ``event_<column>``."""
    return {
        "decided_question": attempt.question_id,
        "moment": now,
        "now": now,
        "clock_moved": moved().total_seconds(),
        "new_decision": attempt.decision,
        "new_answer": answer,
        "new_note": attempt.note,
        "new_votes": votes,
        "seen_digest": attempt.seen,
        **{f"new_{key}": value for key, value in decider_values(attempt.by, attempt.channel).items()},
        **{f"event_{key}": value for key, value in event.items()},
    }


def _settled(
    question: Question,
    attempt: Attempt,
    answer: dict[str, Any] | None,
    now: datetime,
    call_version: int | None,
    chat_version: int,
) -> Settled:
    """The question as a recorded decision left it, and the versions the decision wrote."""
    verdict = Verdict(attempt.decision, now, answer, attempt.note, attempt.by, attempt.channel)
    versions = (int(chat_version), None if call_version is None else int(call_version))
    return Settled(question.decided_with(verdict), versions=versions)


_UNCHECKED_DECIDE = (
    update(questions)
    .where(questions.c.id == bindparam("decided_question"))
    .values(
        {
            **{
                column: bindparam(f"new_{column}", type_=questions.c[column].type)
                for column in ("decision", "answer", "note", "votes", "decided_by", "decided_by_name", "channel")
            },
            "decided_at": bindparam("moment", type_=questions.c.decided_at.type),
        }
    )
)
"""What a decision records on its question, whatever the question's state: each caller adds its checks."""
_DECIDE = _UNCHECKED_DECIDE.where(UNDECIDED_BY_KEY)
_BUMP_CALL = (
    update(tool_calls)
    .where(tool_calls.c.id == bindparam("call_row"))
    .values(version=tool_calls.c.version + constant(1))
    .returning(tool_calls.c.version)
)


_CLAIM_FREED_CALL = (
    update(tool_calls)
    .where(
        tool_calls.c.id == bindparam("call_row"),
        tool_calls.c.claimed_by.is_(None),
        tool_calls.c.result_message_id.is_(None),
        tool_calls.c.version == bindparam("read_version") + constant(1),
        ~exists().where(
            questions.c.tool_call_id == tool_calls.c.id, UNDECIDED_BY_KEY, questions.c.id != bindparam("question_id")
        ),
        exists().where(chats.c.id == tool_calls.c.chat_id, chats.c.version == bindparam("held_version") + constant(1)),
    )
    .values(claimed_by=bindparam("owner", type_=tool_calls.c.claimed_by.type), claimed_until=UNTIL)
)
"""The locked path's ``ClaimAlong`` (SQLite), in the decision's transaction after its bumps: the call, freed by the
decision, stands one version past the one the deciding chat read, and its chat one past the one it held."""


def _decide_at_once() -> Executable:
    """The writes of a decision as one PostgreSQL statement of data-modifying CTEs (one round trip, not four).

    Every part runs to completion whatever the final ``SELECT`` reads; a decision that finds the
    question decided already is refused by the caller, which rolls all of it back.
    """
    decided = _DECIDE.returning(questions.c.id).cte("decided")
    bumped = _BUMP_CALL.cte("bumped")
    woken = WAKE_NOTIFY.cte("woken")
    logged = INSERT_EVENT_BOUND.cte("logged")
    return select(
        select(func.count()).select_from(decided).scalar_subquery().label("decided"),
        select(bumped.c.version).scalar_subquery().label("call_version"),
        select(woken.c.version).scalar_subquery().label("chat_version"),
    ).add_cte(logged)


_DECIDE_AT_ONCE = _decide_at_once()


_READABLE = (  # an approval whose row reads back (see question_from_row); the locked path finds the rest
    questions.c.kind == constant("approval"),
    questions.c.requested_schema.is_(None),
    questions.c.votes.is_(None),
    or_(questions.c.extra.is_(None), func.json_typeof(questions.c.extra) == constant("object")),
)
"""What a decision of a question it has not read asks of the question besides passing the rules: an approval whose
row reads back (and whose call's arguments are a JSON object: ``_ODD_ARGUMENTS``)."""
_READ_BACK = [
    column for column in questions.c if column.name not in ("digest", "follow_up_at", "reminded_at", "escalated_at")
]
"""The columns of a question a statement that decides it returns: all but the digest, which only its rules read, and
the follow-ups', which a question without an approval policy (the only kind these statements decide) never has (the
statement of several decisions must stay under psycopg's 4 kB)."""
_ODD_ARGUMENTS = func.json_typeof(tool_calls.c.arguments) != constant("object")


def _decided_if_open(
    decision: Decision, *, decide: Update = _UNCHECKED_DECIDE, readable: bool = False, seen: ColumnElement[Any] = SEEN
) -> Update:
    """``decide`` (the decision's writes on the question) only where no rule stops ``decision`` made on a view of
    the arguments of digest ``seen`` ([`passes`][tarry.store.decision_sql.passes]); with ``readable``, also only on
    an approval whose row and call read back (``_READABLE``)."""
    if readable:
        return decide.where(*passes(decision, odd_call=_ODD_ARGUMENTS, seen=seen), *_READABLE)
    return decide.where(*passes(decision, seen=seen))


def _bumped_call(decided: CTE, *, claim: bool = False) -> CTE:
    """The version bump of the call of the question ``decided`` returns, if any; with ``claim``, also the claim of
    ``ClaimAlong`` (parameters ``owner``, ``until``, ``read_version``, ``held_version``), and ``claimed``."""
    values: dict[str, Any] = {"version": tool_calls.c.version + constant(1)}
    returned: list[ColumnElement[Any]] = [tool_calls.c.version]
    if claim:
        owner = bindparam("owner", type_=tool_calls.c.claimed_by.type)
        until = UNTIL
        other_open = select(questions.c.id).where(
            questions.c.tool_call_id == decided.c.tool_call_id,
            UNDECIDED_BY_KEY,
            questions.c.id != decided.c.id,
        )
        chat_held = select(chats.c.id).where(
            chats.c.id == bindparam("woken_chat"), chats.c.version == bindparam("held_version")
        )
        # The statement's snapshot: the chat before the decision's own wake bumps it. The call's own columns are
        # read from its newest row, should another process have changed it since.
        freed = select(decided.c.id).where(~exists(other_open), exists(chat_held)).cte("freed")
        free = and_(
            tool_calls.c.claimed_by.is_(None), tool_calls.c.version == bindparam("read_version"), exists(freed.select())
        )
        values["claimed_by"] = case((free, owner), else_=tool_calls.c.claimed_by)
        values["claimed_until"] = case((free, until), else_=tool_calls.c.claimed_until)
        returned.append(and_(tool_calls.c.claimed_by == owner, tool_calls.c.claimed_until == until).label("claimed"))
    return (
        update(tool_calls)
        .where(tool_calls.c.id == select(decided.c.tool_call_id).scalar_subquery())
        .values(values)
        .returning(*returned)
        .cte("bumped")
    )


FastShape = Literal["known", "claim", "unread", "together"]
"""Which statement decides without the row lock: ``known`` (the question read before, or held by a chat),
``claim`` (as ``known``, also claiming the call: ``ClaimAlong``), ``unread`` (the question not read: it returns
the question) and ``together`` (several unread questions at once)."""


@functools.lru_cache(maxsize=16)
def fast_statement(decision: Decision, shape: FastShape) -> Executable:
    """The one PostgreSQL statement that records ``decision`` where no rule stops it, in the ``shape`` asked for.

    Its parts are data-modifying CTEs: the decision on the question, the call's version bump, the
    chat's wake and the trail's row; every part but the decision writes only if the decision did.
    """
    if shape == "together":
        return _decide_unread_together(decision)
    if shape == "unread":
        return _decide_unread(decision)
    return _decide_if_open(decision, claim=shape == "claim")


def _decide_if_open(decision: Decision, *, claim: bool) -> Executable:
    """``_DECIDE_AT_ONCE`` that decides only as ``_decided_if_open`` allows; every other part writes only if
    it did. With ``claim``, the call's bump claims it too (``_bumped_call``)."""
    decided = _decided_if_open(decision).returning(questions.c.id, questions.c.tool_call_id).cte("decided")
    bumped = _bumped_call(decided, claim=claim)
    woken = WAKE_NOTIFY.where(exists(decided.select())).cte("woken")
    logged = insert_event_from(decided)
    claimed = [select(bumped.c.claimed).scalar_subquery().label("claimed")] if claim else []
    return select(
        select(func.count()).select_from(decided).scalar_subquery().label("decided"),
        select(bumped.c.version).scalar_subquery().label("call_version"),
        select(woken.c.version).scalar_subquery().label("chat_version"),
        *claimed,
    ).add_cte(logged.cte("logged"))


def _decide_unread(decision: Decision) -> Executable:
    """The decision of ``decide_unread``: ``_decide_if_open`` on a question without fields, whose chat and
    call (for the wake, the bump and the trail) it reads from the question's row as it writes; it returns the
    question with its call's columns (as ``_QUESTION`` reads them) and the versions, or no row."""
    decided = _decided_if_open(decision, readable=True).returning(*_READ_BACK).cte("decided")
    bumped = _bumped_call(decided)
    woken = wake_of(select(decided.c.chat_id).scalar_subquery()).returning(NOTIFIED).cte("woken")
    logged = insert_event_of_decided(decided)
    return (
        select(
            decided,
            *(tool_calls.c[name] for name in _CALL_COLUMNS),
            select(bumped.c.version).scalar_subquery().label("call_version"),
            select(woken.c.version).scalar_subquery().label("chat_version"),
        )
        .select_from(with_its_call(decided))
        .add_cte(logged.cte("logged"))
    )


def decide_unread_together(connection: Sendable, attempts: Sequence[Attempt]) -> list[Settled | Exception | None]:
    """``decide_unread`` for several attempts of one decision, each on another question, in one statement.

    Returns what each attempt came to, in order, or ``None`` for one the statement wrote nothing
    for: ``decide_question`` then decides it alone, as after ``decide_unread``. The
    decisions share one moment; each has its own row on the trail, with its own decider,
    channel and note. Two questions of one chat wake it once, and bump it one version. A
    decided question whose row does not read back gets the error that says why, and only it.
    """
    decision = attempts[0].decision
    if any(attempt.decision != decision for attempt in attempts):
        raise ValueError("Attempts decided together must all make one decision")
    if len({attempt.question_id for attempt in attempts}) != len(attempts):
        raise ValueError("Attempts decided together must each name another question")
    now = utcnow()
    answer: dict[str, Any] | None = {} if decision == "accept" else None
    values = {
        "moment": now,
        "now": now,
        "clock_moved": moved().total_seconds(),
        "new_decision": decision,
        "new_answer": answer,
        **_given(attempts),
    }
    rows = {row["id"]: row for row in fetch_all(connection, fast_statement(decision, "together"), values)}
    settled: list[Settled | Exception | None] = []
    for attempt in attempts:
        row = rows.get(attempt.question_id)
        if row is None:
            settled.append(None)
            continue
        try:
            question = question_and_call_from_row(row)
        except Exception as error:  # recorded all the same, as the others in the statement
            settled.append(error)
            continue
        settled.append(_settled(question, attempt, answer, now, row["call_version"], row["chat_version"]))
    return settled


_DECIDERS = ("decided_by", "decided_by_name", "channel")
"""The columns of a question that say who decided it, through what (``decider_values``)."""


def _given(attempts: Sequence[Attempt]) -> dict[str, list[Any]]:
    """The arrays of ``_decide_unread_together``'s statement: each attempt's question, note, digest seen (``saw``)
    and decider, in the attempts' order."""
    deciders = [decider_values(attempt.by, attempt.channel) for attempt in attempts]
    return {
        "given_question": [attempt.question_id for attempt in attempts],
        "given_note": [attempt.note for attempt in attempts],
        "given_saw": [attempt.seen for attempt in attempts],
        **{f"given_{column}": [decider[column] for decider in deciders] for column in _DECIDERS},
    }


def _decide_unread_together(decision: Decision) -> Executable:
    """The statement of ``decide_unread_together``: ``_decide_unread``'s, for each question the array
    ``given_question`` names, with the note and decider of the same place in ``given_note`` and ``given_<column>``;
    each decided question's call is bumped and its chat woken once, however many of its questions it decided."""
    names = ("question", "note", "saw", *_DECIDERS)
    given = (
        func.unnest(*(bindparam(f"given_{name}", type_=postgresql.ARRAY(String)) for name in names))
        .table_valued(*names)
        .render_derived(name="given")
    )
    listed = bindparam("given_question", type_=postgresql.ARRAY(String))
    decide = (
        update(questions)
        # By the id twice: as a list the planner looks up in the key's index, and to join each question to its
        # own values.
        .where(questions.c.id == any_(listed), questions.c.id == given.c.question)
        .values(
            decision=bindparam("new_decision", type_=questions.c.decision.type),
            answer=bindparam("new_answer", type_=questions.c.answer.type),
            decided_at=bindparam("moment", type_=questions.c.decided_at.type),
            note=given.c.note,
            **{column: given.c[column] for column in _DECIDERS},
        )
    )
    checked = _decided_if_open(decision, decide=decide, readable=True, seen=given.c.saw)
    decided = checked.returning(*_READ_BACK).cte("decided")
    bumped = (
        update(tool_calls)
        .where(tool_calls.c.id.in_(select(decided.c.tool_call_id)))
        .values(version=tool_calls.c.version + constant(1))
        .returning(tool_calls.c.id, tool_calls.c.version)
        .cte("bumped")
    )
    woken = wake_where(chats.c.id.in_(select(decided.c.chat_id))).returning(chats.c.id, NOTIFIED).cte("woken")
    logged = insert_event_of_decided(decided, decisions_too=True)
    return (
        select(
            decided,
            *(tool_calls.c[name] for name in _CALL_COLUMNS),
            bumped.c.version.label("call_version"),
            woken.c.version.label("chat_version"),
        )
        .select_from(
            with_its_call(decided)
            .outerjoin(bumped, bumped.c.id == decided.c.tool_call_id)
            .join(woken, woken.c.id == decided.c.chat_id)
        )
        .add_cte(logged.cte("logged"))
    )


def _why_lost(question: Question) -> str:
    if question.decision is None:
        return "the call had already ended"
    who = "nobody known" if question.decided_by is None else question.decided_by.label
    return f"already decided ({question.decision}) by {who}"
