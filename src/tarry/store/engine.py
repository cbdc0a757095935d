"""Database URLs and engines: aiosqlite for SQLite (WAL, ``BEGIN IMMEDIATE`` for writers), psycopg for PostgreSQL."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from tarry.errors import TarryError

DEFAULT_URL = "sqlite:///tarry.db"
_DRIVERS = {
    "sqlite": "sqlite+aiosqlite",
    "sqlite+aiosqlite": "sqlite+aiosqlite",
    "postgresql": "postgresql+psycopg",
    "postgres": "postgresql+psycopg",
    "postgresql+psycopg": "postgresql+psycopg",
}


class StoreUnavailableError(TarryError):
    """The database cannot be reached or opened."""


def database_url(url: str | None) -> URL:
    """The async driver URL for ``url`` (else ``TARRY_DATABASE_URL``, else ``sqlite:///tarry.db``)."""
    text = url or os.environ.get("TARRY_DATABASE_URL") or DEFAULT_URL
    try:
        parsed = make_url(text)
    except ArgumentError:
        raise ValueError(f"Not a database URL: {text!r}") from None
    driver = _DRIVERS.get(parsed.drivername)
    if driver is None:
        raise ValueError(
            f"Unsupported database URL scheme {parsed.drivername!r}: use sqlite:///path or postgresql://..."
        )
    if driver == "postgresql+psycopg":
        _require("psycopg", "postgres")
    return parsed.set(drivername=driver)


def _require(module: str, extra: str) -> None:
    try:
        __import__(module)
    except ImportError:
        raise ImportError(f"PostgreSQL needs the {extra} extra: pip install 'tarry[{extra}]'") from None


def make_engine(url: URL) -> AsyncEngine:
    """An engine for ``url``, set up for tarry's transactions."""
    if url.get_backend_name() == "sqlite":
        engine = create_async_engine(url, connect_args={"timeout": 30})
        _configure_sqlite(engine)
        return engine
    return create_async_engine(
        url, pool_size=5, max_overflow=10, pool_pre_ping=False, connect_args={"connect_timeout": 5}
    )


def _configure_sqlite(engine: AsyncEngine) -> None:
    @event.listens_for(engine.sync_engine, "connect")
    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we issue BEGIN ourselves
        cursor = dbapi_connection.cursor()
        for pragma in ("journal_mode=WAL", "busy_timeout=30000", "synchronous=NORMAL", "foreign_keys=ON"):
            cursor.execute(f"PRAGMA {pragma}")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def on_begin(connection: Any) -> None:
        writes = connection.get_execution_options().get("tarry_write", False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if writes else "BEGIN")


class Database:
    """An engine with the two kinds of transaction tarry uses: one write, or one consistent read."""

    def __init__(self, url: URL) -> None:
        self.url = url
        self.engine = make_engine(url)
        self.is_sqlite = url.get_backend_name() == "sqlite"
        file_based = self.is_sqlite and url.database not in (None, "", ":memory:")
        self._sqlite_folder = str(Path(str(url.database)).absolute().parent) if file_based else None
        self._writer = self.engine.execution_options(tarry_write=True)
        self._reader = (
            self.engine if self.is_sqlite else self.engine.execution_options(isolation_level="REPEATABLE READ")
        )

    @asynccontextmanager
    async def write(self) -> AsyncIterator[AsyncConnection]:
        """One write transaction (``BEGIN IMMEDIATE`` on SQLite), committed when the block ends."""
        async with self._reachable(), self._writer.begin() as connection:
            yield connection

    @asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncConnection]:
        """One read transaction that sees one snapshot (``REPEATABLE READ`` on PostgreSQL)."""
        async with self._reachable(), self._reader.begin() as connection:
            yield connection

    @asynccontextmanager
    async def _reachable(self) -> AsyncIterator[None]:
        if self._sqlite_folder is not None:
            self._check_sqlite_folder(self._sqlite_folder)
        try:
            yield
        except DBAPIError as error:
            if not error.connection_invalidated and not _is_connect_error(error):
                raise
            where = self.url.render_as_string(hide_password=True)
            raise StoreUnavailableError(f"Cannot reach the database at {where}: {error.orig}") from error
        except OSError as error:
            where = self.url.render_as_string(hide_password=True)
            raise StoreUnavailableError(f"Cannot reach the database at {where}: {error}") from error

    def _check_sqlite_folder(self, folder: str) -> None:
        """Fail clearly before aiosqlite opens a file in a missing folder (it leaves its thread behind then)."""
        if not os.path.isdir(folder):
            where = self.url.render_as_string(hide_password=True)
            raise StoreUnavailableError(f"Cannot reach the database at {where}: the folder {folder} does not exist")
        self._sqlite_folder = None

    async def dispose(self) -> None:
        """Close every pooled connection."""
        await self.engine.dispose()


def _is_connect_error(error: DBAPIError) -> bool:
    text = str(error.orig).lower()
    return any(
        phrase in text
        for phrase in (
            "connection refused",
            "could not connect",
            "unable to open database",
            "timeout expired",
            "connection failed",
            "name or service not known",
            "no such host",
        )
    )
