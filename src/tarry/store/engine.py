"""Database URLs and engines: aiosqlite for SQLite (WAL, ``BEGIN IMMEDIATE`` for writers), psycopg for PostgreSQL."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import create_engine, event
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from tarry.errors import TarryError

T = TypeVar("T")
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


def _configure_sqlite(engine: AsyncEngine | Engine) -> None:
    target = engine.sync_engine if isinstance(engine, AsyncEngine) else engine

    @event.listens_for(target, "connect")
    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we issue BEGIN ourselves
        cursor = dbapi_connection.cursor()
        for pragma in ("journal_mode=WAL", "busy_timeout=30000", "synchronous=NORMAL", "foreign_keys=ON"):
            cursor.execute(f"PRAGMA {pragma}")
        cursor.close()

    @event.listens_for(target, "begin")
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
        self._sync_engine: Engine | None = None
        self._threads: ThreadPoolExecutor | None = None
        if self.is_sqlite:
            # The hot path runs each whole transaction in one hop to a worker thread on the standard
            # driver: about five times faster per transaction than a hop per statement through aiosqlite.
            self._sync_engine = create_engine(
                url.set(drivername="sqlite+pysqlite"), connect_args={"timeout": 30, "check_same_thread": False}
            )
            _configure_sqlite(self._sync_engine)
            self._threads = ThreadPoolExecutor(max_workers=4, thread_name_prefix="tarry-sqlite")

    async def run_write(self, work: Callable[[Connection], T]) -> T:
        """Run ``work`` in one write transaction (``BEGIN IMMEDIATE`` on SQLite) and return what it returns."""
        return await self._run(work, write=True)

    async def run_read(self, work: Callable[[Connection], T]) -> T:
        """Run ``work`` in one read transaction that sees one snapshot (``REPEATABLE READ`` on PostgreSQL)."""
        return await self._run(work, write=False)

    async def _run(self, work: Callable[[Connection], T], *, write: bool) -> T:
        async with self._reachable():
            if self._sync_engine is None or self._threads is None:
                async with (self._writer if write else self._reader).begin() as connection:
                    return await connection.run_sync(work)
            engine = self._sync_engine.execution_options(tarry_write=True) if write else self._sync_engine

            def transaction() -> T:
                with engine.begin() as connection:
                    return work(connection)

            return await asyncio.get_running_loop().run_in_executor(self._threads, transaction)

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
        if self._sync_engine is not None and self._threads is not None:
            await asyncio.get_running_loop().run_in_executor(self._threads, self._sync_engine.dispose)
            self._threads.shutdown(wait=False)


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
