"""The hot statements, sent straight to the driver's cursor instead of through SQLAlchemy's execution layer.

SQLAlchemy still builds each statement and compiles it, once per set of parameter names; the
parameters are bound and the rows read with the processors its compilation chose, so values
come back as ``connection.execute`` gives them. What is skipped, at every call, is the cache
lookup, the execution context and the result object: 50–150 µs a statement on PostgreSQL
(docs/benchmarks.md, "What one statement costs"). The engine's ``before_cursor_execute`` and
``after_cursor_execute`` listeners still hear each statement, and the driver's errors are
handled as SQLAlchemy handles them (wrapped in ``DBAPIError``; a broken connection is invalidated).

A statement this cannot send goes through ``connection.execute`` instead, with the same result:
one whose parameters expand (``IN`` lists), or that leaves a column with a default computed in
Python (``default=0``) to SQLAlchemy.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping
from typing import Any, cast

from sqlalchemy import Connection, Executable
from sqlalchemy.engine import Dialect
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.compiler import SQLCompiler


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

    def rows(self, cursor: Any) -> list[dict[str, Any]]:
        """The cursor's rows as mappings of the values ``connection.execute`` would give."""
        if cursor.description is None:
            return []
        found = cursor.fetchall()
        if not self.columns:  # textual SQL: the driver's values, by the names it gives
            names = [column[0] for column in cursor.description]
            return [dict(zip(names, row, strict=True)) for row in found]
        return [
            {
                name: value if process is None else process(value)
                for (name, process), value in zip(self.columns, row, strict=True)
            }
            for row in found
        ]


_COMPILED: weakref.WeakKeyDictionary[Executable, dict[tuple[str, frozenset[str]], _Compiled]] = (
    weakref.WeakKeyDictionary()
)


def _compiled(connection: Connection, statement: Executable, values: Mapping[str, Any]) -> _Compiled:
    forms = _COMPILED.get(statement)
    if forms is None:
        forms = _COMPILED[statement] = {}
    key = (connection.dialect.name, frozenset(values))
    found = forms.get(key)
    if found is None:
        found = forms[key] = _Compiled(statement, connection.dialect, key[1])
    return found


def fetch_all(connection: Connection, statement: Executable, values: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Run ``statement`` with ``values`` on ``connection``'s driver; its rows as mappings by column name."""
    compiled = _compiled(connection, statement, values)
    if not compiled.direct:
        return [dict(row) for row in connection.execute(statement, dict(values)).mappings()]
    cursor = _send(connection, compiled, values)
    try:
        return compiled.rows(cursor)
    finally:
        cursor.close()


def fetch_one(connection: Connection, statement: Executable, values: Mapping[str, Any]) -> dict[str, Any] | None:
    """The first row :func:`fetch_all` would give, or ``None``."""
    rows = fetch_all(connection, statement, values)
    return rows[0] if rows else None


def fetch_value(connection: Connection, statement: Executable, values: Mapping[str, Any]) -> Any:
    """The first column of the first row :func:`fetch_all` would give, or ``None``."""
    row = fetch_one(connection, statement, values)
    return None if row is None else next(iter(row.values()))


def run(connection: Connection, statement: Executable, values: Mapping[str, Any]) -> int:
    """Run ``statement``, which returns no rows, with ``values``; the number of rows it changed."""
    compiled = _compiled(connection, statement, values)
    if not compiled.direct:
        return int(connection.execute(statement, dict(values)).rowcount)
    cursor = _send(connection, compiled, values)
    try:
        return int(cursor.rowcount)
    finally:
        cursor.close()


def _send(connection: Connection, compiled: _Compiled, values: Mapping[str, Any]) -> Any:
    """Execute ``compiled`` on a new cursor of the driver's connection, telling the engine's listeners."""
    parameters = compiled.parameters(values)
    dbapi = connection.connection.dbapi_connection
    assert dbapi is not None  # an open connection has one
    cursor = dbapi.cursor()
    listened = connection._has_events or connection.engine._has_events
    if listened:
        connection.dispatch.before_cursor_execute(connection, cursor, compiled.sql, parameters, None, False)
    try:
        cursor.execute(compiled.sql, parameters)
    except Exception as error:
        cursor.close()
        connection._handle_dbapi_exception(error, compiled.sql, parameters, cursor, None)
    if listened:
        connection.dispatch.after_cursor_execute(connection, cursor, compiled.sql, parameters, None, False)
    return cursor
