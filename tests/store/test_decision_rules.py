"""The rules of a decision say the same in Python and in SQL: on generated question and call rows, stored in a real
SQLite file and in PostgreSQL, the first rule that stops each decision is the same one either way."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from sqlalchemy import Connection, and_, insert

from tarry.clock import utcnow
from tarry.decision_rules import RULES, Facts, first_stop
from tarry.edits import arguments_digest
from tarry.questions import DECISIONS
from tarry.store import Store
from tarry.store.deciding import _ODD_ARGUMENTS, _QUESTION_NOW
from tarry.store.decision_sql import SQL_RULES, passes, stopped_by
from tarry.store.moment import lease_values
from tarry.store.rows import question_and_call_from_row
from tarry.store.tables import chats, messages, questions, tool_calls

HOUR = timedelta(hours=1)
ARGUMENTS = {"to": "Bob"}
SHOWN = arguments_digest(ARGUMENTS)
"""The digest of what the generated call's approval proposes."""
OTHER = arguments_digest({"to": "Eve"})


def test_the_sql_forms_name_the_python_rules_in_their_order() -> None:
    assert [rule.name for rule in SQL_RULES] == [rule.name for rule in RULES]
    assert len({rule.name for rule in RULES}) == len(RULES), "each rule has a name of its own"


@dataclass(frozen=True)
class CallRow:
    """A question's call as generated: who holds its claim until when (hours from now), and whether it ended."""

    claimed_by: str | None
    claimed_until: int | None
    ended: bool


@dataclass(frozen=True)
class QuestionRow:
    """A question as generated, with its call (``None``: a question of the chat itself)."""

    call: CallRow | None
    decision: str | None
    expires_in: int | None
    """Hours from now (negative: past)."""
    policy: dict[str, Any] | None
    extra: dict[str, Any] | None
    seen: str | None = None
    """The digest the decision says its decider saw (``None``: it does not say)."""


# Weighted toward what reaches the later rules: an undecided question, with time left, of a call that runs.
_HOURS = st.sampled_from([None, -1, 1, 2])
_CALLS = st.builds(
    CallRow, st.sampled_from([None, "worker-1", "worker-1"]), _HOURS, st.sampled_from([False, False, True])
)
_QUESTIONS = st.builds(
    QuestionRow,
    st.one_of(_CALLS, st.none()),
    st.sampled_from([None, None, None, *DECISIONS]),
    _HOURS,
    st.sampled_from([None, {"count": 1, "by": None}, {"count": 2, "by": "finance"}]),
    st.sampled_from(
        [None, {}, {"awaited": True}, {"awaited": False}, {"awaited": "true"}, {"awaited": 1}, {"other": True}]
    ),
    st.sampled_from([None, None, SHOWN, OTHER]),
)


def _hours(now: datetime, hours: int | None) -> datetime | None:
    return None if hours is None else now + hours * HOUR


def _store_rows(connection: Connection, generated: QuestionRow, now: datetime) -> str:
    """Insert a chat, the question's call (and its result, when it ended) and the question; the question's id."""
    chat_id, question_id = str(uuid.uuid4()), str(uuid.uuid4())
    connection.execute(
        insert(chats).values(id=chat_id, settings={}, created_at=now, version=0, message_count=2, schedule_version=0)
    )
    call_row = None
    if generated.call is not None:
        call = generated.call
        result = None
        if call.ended:
            result = connection.scalar(
                insert(messages)
                .values(chat_id=chat_id, position=1, role="tool", content="done", created_at=now)
                .returning(messages.c.id)
            )
        call_row = connection.scalar(
            insert(tool_calls)
            .values(
                chat_id=chat_id,
                message_position=0,
                call_id="call-1",
                name="pay",
                arguments=ARGUMENTS,
                needs_approval=True,
                version=0,
                claimed_by=call.claimed_by,
                claimed_until=_hours(now, call.claimed_until),
                result_message_id=result,
                created_at=now,
            )
            .returning(tool_calls.c.id)
        )
    connection.execute(
        insert(questions).values(
            id=question_id,
            chat_id=chat_id,
            tool_call_id=call_row,
            number=0,
            kind="approval",
            message="Pay Bob?",
            extra=generated.extra,
            asked_at=now - 3 * HOUR,
            expires_at=_hours(now, generated.expires_in),
            decision=generated.decision,
            decided_at=None if generated.decision is None else now - HOUR,
            policy=generated.policy,
            digest=None if call_row is None else SHOWN,
        )
    )
    return question_id


def test_python_and_sql_stop_each_decision_by_the_same_rule(database_url: str) -> None:
    with Store(database_url) as store:
        store.setup_sync()
        postgres = not store.db.is_sqlite
        verdicts = [stopped_by(decision).label(f"stop_{decision}") for decision in DECISIONS]
        passing = [and_(*passes(decision)).label(f"pass_{decision}") for decision in DECISIONS]
        if postgres:  # the fast path's own look at the call, which also asks its arguments to be an object
            passing += [and_(*passes(d, odd_call=_ODD_ARGUMENTS)).label(f"odd_{d}") for d in DECISIONS]
        query = _QUESTION_NOW.add_columns(*verdicts, *passing)
        seen: set[tuple[str, str | None]] = set()

        @settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        @given(_QUESTIONS)
        # One row each rule stops, so every rule is reached whatever the generated rows are.
        @example(QuestionRow(CallRow(None, None, ended=False), "accept", None, None, None))
        @example(QuestionRow(None, None, -1, None, None))
        @example(QuestionRow(CallRow(None, None, ended=True), None, None, None, None))
        @example(QuestionRow(CallRow("worker-1", 1, ended=False), None, None, None, None))
        @example(QuestionRow(CallRow("worker-1", -1, ended=False), None, 1, {"count": 2, "by": "x"}, {}))
        @example(QuestionRow(CallRow("worker-1", 1, ended=False), None, 1, None, {"awaited": True}))
        @example(QuestionRow(CallRow("worker-1", 1, ended=False), None, 1, None, {"awaited": "true"}))
        @example(QuestionRow(CallRow("worker-1", 1, ended=False), None, 1, None, {"awaited": 1}))
        @example(QuestionRow(CallRow(None, None, ended=False), None, 1, {"count": 2, "by": "x"}, None, OTHER))
        @example(QuestionRow(CallRow(None, None, ended=False), None, 1, {"count": 2, "by": "x"}, None, SHOWN))
        @example(QuestionRow(None, None, 1, None, None, SHOWN))
        def check(generated: QuestionRow) -> None:
            with store.db.sync_engine.begin() as connection:
                question_id = _store_rows(connection, generated, utcnow())
                given = {"question_id": question_id, "seen_digest": generated.seen, **lease_values()}
                row = connection.execute(query, given).mappings().one()
            question = question_and_call_from_row(row)
            claimed_until = row["claimed_until"]
            running = row["claimed_by"] is not None and claimed_until is not None and claimed_until > row["now"]
            closed = row["result_message_id"] is not None
            for decision in DECISIONS:
                facts = Facts(question, decision, running=running, closed=closed, now=row["now"], seen=generated.seen)
                rule = first_stop(facts)
                expected = None if rule is None else rule.name
                assert row[f"stop_{decision}"] == expected, (decision, generated)
                assert row[f"pass_{decision}"] in ((True, 1) if rule is None else (False, 0)), (decision, generated)
                if postgres:
                    assert row[f"odd_{decision}"] is (rule is None), (decision, generated)
                seen.add((decision, expected))

        check()
    every_rule = {rule.name for rule in RULES} | {None}
    assert {name for _, name in seen} == every_rule, "the examples reached every rule, and none"
