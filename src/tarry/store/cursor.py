"""The hot statements, sent straight to the driver's cursor instead of through SQLAlchemy's execution layer.

SQLAlchemy still builds each statement and compiles it, once per dialect and set of parameter names; the
parameters are bound and the rows read with the processors its compilation chose, so values
come back as ``connection.execute`` gives them. What is skipped, at every call, is the cache
lookup, the execution context and the result object: 50–150 µs a statement on PostgreSQL
(docs/benchmarks.md, "What one statement costs"). The engine's ``before_cursor_execute`` and
``after_cursor_execute`` listeners still hear each statement (with a plain object for the
execution context, and for the connection a ``LoopConnection`` when sent from the loop; a
``retval=True`` listener may change what is sent), and the driver's errors are handled as
SQLAlchemy handles them (wrapped in ``DBAPIError``; a broken connection is invalidated).

A statement this cannot send goes through ``connection.execute`` instead, with the same result:
one whose parameters expand (``IN`` lists), or that leaves a column with a default computed in
Python (``default=0``) to SQLAlchemy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, cast

from sqlalchemy import Connection, Engine, Executable
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.util import await_only


class _Compiled:
    """A statement compiled for one dialect and one set of parameter names: its SQL and its processors."""

    def __init__(self, statement: Executable, dialect: Dialect, names: frozenset[str]) -> None:
        compiled = cast(ClauseElement, statement).compile(dialect=dialect, column_keys=sorted(names))
        assert isinstance(compiled, SQLCompiler)
        self.compiled = compiled
        self.sql = compiled.string
        self.direct = not (
            compiled.literal_execute_params
            or compiled.post_compile_params
            or compiled.insert_prefetch  # defaults computed in Python, which only SQLAlchemy's execution runs
            or compiled.update_prefetch
        )
        self.binds = cast(dict[str, Callable[[Any], Any]], dict(compiled._bind_processors))  # none for tuples here
        self.columns = [
            (entry.keyname, entry.type._cached_result_processor(dialect, None)) for entry in compiled._result_columns
        ]

    def parameters(self, values: Mapping[str, Any]) -> Any:
        """The driver's parameters for ``values``: a dict by name, or a tuple in order for a positional driver."""
        given = self.compiled.construct_params(dict(values), escape_names=False)
        for name, process in self.binds.items():
            if name in given:
                given[name] = process(given[name])
        if self.compiled.positional:
            return tuple(given[name] for name in self.compiled.positiontup or ())
        escaped = self.compiled.escaped_bind_names
        return {escaped.get(name, name): value for name, value in given.items()} if escaped else given

    def rows(self, sent: _Sent) -> list[dict[str, Any]]:
        """The rows a statement sent, as mappings of the values ``connection.execute`` would give."""
        if not self.columns:  # textual SQL: the driver's values, by the names it gives
            names = [column[0] for column in sent.description or ()]
            return [dict(zip(names, row, strict=True)) for row in sent.rows]
        return [
            {
                name: value if process is None else process(value)
                for (name, process), value in zip(self.columns, row, strict=True)
            }
            for row in sent.rows
        ]


@dataclass
class _Sent:
    """What the driver gave back for one statement."""

    description: Any
    rows: Sequence[Any]
    rowcount: int


class LoopConnection:
    """A psycopg asyncio connection that statements are sent on from a greenlet on the event loop
    (``tarry.store.loop_connections``); only this module's functions take it."""

    def __init__(self, driver: Any, engine: Engine) -> None:
        self.driver = driver
        self.engine = engine
        self.dialect = engine.dialect

    def send(self, sql: str, parameters: Any, *, describe: bool = True) -> _Sent:
        """Execute ``sql`` and fetch its rows, waiting for the server without blocking the loop.

        ``describe``: also give the columns' description, which psycopg builds anew at each reading
        (about 1 µs a column): only textual SQL, whose columns SQLAlchemy does not know, needs it.
        """
        cursor, context = self.driver.cursor(), SimpleNamespace()
        if self.engine._has_events:
            sql, parameters = _before(self.engine.dispatch, self, cursor, sql, parameters, context)
        try:
            sent: _Sent = await_only(_executed(cursor, sql, parameters, describe))
        except self.dialect.loaded_dbapi.Error as error:
            broke = bool(self.driver.broken or self.driver.closed)
            base, dialect = self.dialect.loaded_dbapi.Error, self.dialect
            wrapped = DBAPIError.instance(sql, parameters, error, base, connection_invalidated=broke, dialect=dialect)
            raise wrapped from error
        if self.engine._has_events:
            self.engine.dispatch.after_cursor_execute(self, cursor, sql, parameters, context, False)
        return sent


def _before(dispatch: Any, connection: Any, cursor: Any, sql: str, parameters: Any, context: Any) -> tuple[str, Any]:
    """Tell the ``before_cursor_execute`` listeners, each of which may return the statement and parameters to
    send instead (``retval=True``), as SQLAlchemy's execution does."""
    for listener in dispatch.before_cursor_execute:
        sql, parameters = listener(connection, cursor, sql, parameters, context, False)
    return sql, parameters


async def _executed(cursor: Any, sql: str, parameters: Any, describe: bool) -> _Sent:
    """Execute ``sql`` on an asyncio ``cursor``, fetch its rows and close it, in one await (one switch out of
    the greenlet and back)."""
    async with cursor:
        await cursor.execute(sql, parameters)
        result = cursor.pgresult
        if result is None or not result.nfields:  # no rows to fetch: a statement without RETURNING
            return _Sent(None, [], cursor.rowcount)
        rows = await cursor.fetchall()
        return _Sent(cursor.description if describe else None, rows, cursor.rowcount)


Sendable = Connection | LoopConnection
"""What the functions here send statements on: a SQLAlchemy connection, or a loop's (PostgreSQL)."""


_FORMS = "_tarry_compiled_forms"
"""The attribute of a statement that holds its compiled forms: they refer to the statement, so they live and
go with it (a weak mapping of statement to forms would keep every statement alive)."""


def _compiled(connection: Sendable, statement: Executable, values: Mapping[str, Any]) -> _Compiled:
    forms: dict[tuple[Dialect, frozenset[str]], _Compiled] | None = getattr(statement, _FORMS, None)
    if forms is None:
        forms = {}
        setattr(statement, _FORMS, forms)
    key = (connection.dialect, frozenset(values))
    found = forms.get(key)
    if found is None:
        found = forms[key] = _Compiled(statement, connection.dialect, key[1])
    return found


def fetch_all(connection: Sendable, statement: Executable, values: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Run ``statement`` with ``values`` on ``connection``'s driver; its rows as mappings by column name."""
    compiled = _compiled(connection, statement, values)
    if not compiled.direct:
        return [dict(row) for row in _through_sqlalchemy(connection, statement, values).mappings()]
    return compiled.rows(_send(connection, compiled, values))


def fetch_one(connection: Sendable, statement: Executable, values: Mapping[str, Any]) -> dict[str, Any] | None:
    """The first row ``fetch_all`` would give, or ``None``."""
    rows = fetch_all(connection, statement, values)
    return rows[0] if rows else None


def fetch_value(connection: Sendable, statement: Executable, values: Mapping[str, Any]) -> Any:
    """The first column of the first row ``fetch_all`` would give, or ``None``."""
    row = fetch_one(connection, statement, values)
    return None if row is None else next(iter(row.values()))


def run(connection: Sendable, statement: Executable, values: Mapping[str, Any]) -> int:
    """Run ``statement``, which returns no rows, with ``values``; the number of rows it changed."""
    compiled = _compiled(connection, statement, values)
    if not compiled.direct:
        return int(_through_sqlalchemy(connection, statement, values).rowcount)
    return _send(connection, compiled, values).rowcount


def _through_sqlalchemy(connection: Sendable, statement: Executable, values: Mapping[str, Any]) -> Any:
    if isinstance(connection, LoopConnection):
        raise TypeError(f"This statement cannot be sent from the event loop: {statement}")
    return connection.execute(statement, dict(values))


def _send(connection: Sendable, compiled: _Compiled, values: Mapping[str, Any]) -> _Sent:
    """Execute ``compiled`` on a new cursor of the driver's connection, telling the engine's listeners."""
    parameters = compiled.parameters(values)
    if isinstance(connection, LoopConnection):
        return connection.send(compiled.sql, parameters, describe=not compiled.columns)
    dbapi = connection.connection.dbapi_connection
    assert dbapi is not None  # an open connection has one
    cursor, context, sql = dbapi.cursor(), SimpleNamespace(), compiled.sql
    listened = connection._has_events or connection.engine._has_events
    if listened:
        sql, parameters = _before(connection.dispatch, connection, cursor, sql, parameters, context)
    try:
        cursor.execute(sql, parameters)
        sent = _Sent(cursor.description, cursor.fetchall() if cursor.description else [], cursor.rowcount)
    except Exception as error:
        connection._handle_dbapi_exception(error, sql, parameters, cursor, None)
    finally:
        cursor.close()
    if listened:
        connection.dispatch.after_cursor_execute(connection, cursor, sql, parameters, context, False)
    return sent
