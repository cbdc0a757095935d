"""The one clock leases are judged by: the database's, so processes whose clocks differ still agree.

A claim's deadline is written and compared inside the statement: on PostgreSQL with the server's
``statement_timestamp()`` (the same value everywhere in one statement), never with a time a process
sent. SQLite is one file on one host, so its processes share that host's clock: there the moment is
[`tarry.clock.utcnow`][tarry.clock.utcnow], sent as a parameter, as every other time the store writes.

Either way the offset a test moved this process's clock by ([`tarry.clock.advance`][tarry.testing.advance_clock]) is
added, so a test still makes a lease run out at once.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import bindparam
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.expression import ColumnElement
from sqlalchemy.sql.visitors import InternalTraversal

from tarry.clock import moved, utcnow
from tarry.store.tables import UTCDateTime


class _Moment(ColumnElement[datetime]):
    """A moment of the lease clock, ``ahead`` (a parameter's name, or ``None``) seconds from now."""

    type = UTCDateTime()
    inherit_cache = True
    _traverse_internals = [  # noqa: RUF012 (SQLAlchemy's own; what tells two moments apart in its cache)
        ("parameter", InternalTraversal.dp_string),
        ("ahead", InternalTraversal.dp_string),
    ]

    def __init__(self, parameter: str, ahead: str | None) -> None:
        self.parameter = parameter
        self.ahead = ahead


@compiles(_Moment)
def _sent(moment: _Moment, compiler: SQLCompiler, **kw: Any) -> str:
    """Elsewhere (SQLite): the time this process sent."""
    return compiler.process(bindparam(moment.parameter, type_=UTCDateTime()), **kw)


@compiles(_Moment, "postgresql")
def _server(moment: _Moment, compiler: SQLCompiler, **kw: Any) -> str:
    """PostgreSQL: the server's time when the statement began, moved as the test moved this process's clock."""
    offset = compiler.process(bindparam("clock_moved"), **kw) + "::float8"  # typed, for a statement prepared alone
    if moment.ahead is not None:
        offset = f"{offset}+{compiler.process(bindparam(moment.ahead), **kw)}::float8"
    return f"(statement_timestamp()+({offset})*'1s'::interval)"


NOW = _Moment("now", None)
"""Now, by the lease clock (parameters of ``lease_values``)."""
UNTIL = _Moment("until", "lease_seconds")
"""Now plus the lease, by the lease clock: when a claim taken now runs out (parameters of ``lease_values``)."""


def lease_values(lease: timedelta | None = None) -> dict[str, Any]:
    """The parameters ``NOW`` and (given ``lease``) ``UNTIL`` need, on either database.

    Their names are no column's: an UPDATE executed with a parameter named like a column would set it.
    """
    now = utcnow()
    values: dict[str, Any] = {"now": now, "clock_moved": moved().total_seconds()}
    if lease is not None:
        values |= {"until": now + lease, "lease_seconds": lease.total_seconds()}
    return values
