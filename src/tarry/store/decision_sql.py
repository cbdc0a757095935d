"""The SQL form of each check in [`RULES`][tarry.decision_rules.RULES], under the same name, in the same order.

A statement that records a decision without reading the question first writes only where
[`passes`][tarry.store.decision_sql.passes] holds, none of the rules stopping it;
[`stopped_by`][tarry.store.decision_sql.stopped_by] names the first rule that stops it, as
[`first_stop`][tarry.decision_rules.first_stop] does in Python (tests/store/test_decision_rules.py checks
that both agree on generated rows, on SQLite and PostgreSQL). Each form reads the question's row
(``tarry_questions``) and its call's; none is ever NULL, so its negation is as exact as the form.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    Boolean,
    ColumnElement,
    String,
    and_,
    bindparam,
    case,
    exists,
    false,
    func,
    not_,
    null,
    or_,
    select,
)
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler

from tarry.decision_rules import SEEING
from tarry.questions import Decision
from tarry.store.moment import NOW
from tarry.store.tables import UNDECIDED_BY_KEY, constant, questions, tool_calls


@dataclass(frozen=True)
class SqlRule:
    """A rule's SQL form: ``stops(decision, seen)`` is true for a question row the rule stops ``decision`` on, made by
    a decider who saw the arguments of digest ``seen`` (an expression: NULL when the decision does not say)."""

    name: str
    stops: Callable[[Decision, ColumnElement[Any]], ColumnElement[bool]]


class _Awaited(ColumnElement[bool]):
    """The question's ``extra`` holds ``"awaited": true`` (JSON's true, nothing else), where the store keeps
    [`Question.awaited`][tarry.Question.awaited]; never NULL."""

    type = Boolean()
    inherit_cache = True


@compiles(_Awaited)
def _awaited_sqlite(element: _Awaited, compiler: SQLCompiler, **kw: Any) -> str:
    """SQLite reads JSON's true as the number 1: ask for the value's JSON type instead."""
    extra = compiler.process(questions.c.extra, **kw)
    return f"coalesce(json_type({extra}, '$.awaited') = 'true', 0)"


@compiles(_Awaited, "postgresql")
def _awaited_postgres(element: _Awaited, compiler: SQLCompiler, **kw: Any) -> str:
    """PostgreSQL: the value's JSON text (a string ``"true"`` reads as ``'"true"'``)."""
    extra = compiler.process(questions.c.extra, **kw)
    return f"coalesce(({extra} -> 'awaited')::text = 'true', false)"


AWAITED = _Awaited()
"""The question was asked by its call while it runs, which waits on it
([`Question.awaited`][tarry.Question.awaited])."""

_CALL = select(tool_calls.c.id).where(tool_calls.c.id == questions.c.tool_call_id).correlate_except(tool_calls)
"""The question's call (none for a chat's own question), looked up of its own even in a query that joins it."""


def _decided(decision: Decision, seen: ColumnElement[Any]) -> ColumnElement[bool]:
    return not_(UNDECIDED_BY_KEY)


def _expired(decision: Decision, seen: ColumnElement[Any]) -> ColumnElement[bool]:
    return and_(questions.c.expires_at.is_not(None), questions.c.expires_at <= NOW)


_CALL_ENDED = tool_calls.c.result_message_id.is_not(None)


def _ended(decision: Decision, seen: ColumnElement[Any]) -> ColumnElement[bool]:
    return exists(_CALL.where(_CALL_ENDED))


def _running(decision: Decision, seen: ColumnElement[Any]) -> ColumnElement[bool]:
    if decision != "decline":
        return false()
    running = _CALL.where(tool_calls.c.claimed_by.is_not(None), tool_calls.c.claimed_until > NOW)
    return and_(exists(running), not_(AWAITED))


def _changed(decision: Decision, seen: ColumnElement[Any]) -> ColumnElement[bool]:
    # A digest was given (``seen``) and is not the question's; a question that proposes no arguments has none (NULL),
    # so any digest given misses it, as in Python. Short, and never NULL: it goes in the statement of several.
    if decision not in SEEING:
        return false()
    return not_(func.coalesce(seen == questions.c.digest, seen.is_(None)))


def _policy(decision: Decision, seen: ColumnElement[Any]) -> ColumnElement[bool]:
    return questions.c.policy.is_not(None)


SQL_RULES: tuple[SqlRule, ...] = (
    SqlRule("decided", _decided),
    SqlRule("expired", _expired),
    SqlRule("ended", _ended),
    SqlRule("running", _running),
    SqlRule("changed", _changed),
    SqlRule("policy", _policy),
)
"""The rules of [`RULES`][tarry.decision_rules.RULES] in SQL, named and ordered as they are."""


SEEN: ColumnElement[Any] = bindparam("seen_digest", type_=String(64))
"""The digest of the arguments the decider saw, a statement's parameter ``seen_digest`` (``None``: not said)."""


def passes(
    decision: Decision, *, odd_call: ColumnElement[bool] | None = None, seen: ColumnElement[Any] = SEEN
) -> list[ColumnElement[bool]]:
    """The conditions under which no rule stops ``decision`` on the question's row (for a statement's WHERE), made
    by a decider who saw the arguments of digest ``seen`` (by default the parameter ``seen_digest``).

    With ``odd_call``, a call it holds for stops the decision too, checked in the same look at the call as the rule
    ``ended`` (a statement short enough for psycopg to keep its parsed form).
    """
    if odd_call is None:
        return [not_(rule.stops(decision, seen)) for rule in SQL_RULES]
    ended = exists(_CALL.where(or_(_CALL_ENDED, odd_call)))
    return [not_(ended if rule.name == "ended" else rule.stops(decision, seen)) for rule in SQL_RULES]


def stopped_by(decision: Decision, seen: ColumnElement[Any] = SEEN) -> ColumnElement[Any]:
    """The name of the first rule that stops ``decision`` on the question's row, NULL when none does."""
    return case(*((rule.stops(decision, seen), constant(rule.name)) for rule in SQL_RULES), else_=null())
