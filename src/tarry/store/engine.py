"""Database URLs, and running one transaction whole: on a worker thread, or right on the event loop.

Every transaction of the store is a plain function of a connection, run whole by
``Database.run_write``, ``Database.run_read``, ``Database.run_alone`` or
``Database.run_direct``, on a synchronous driver: Python's own ``sqlite3`` (WAL, ``BEGIN
IMMEDIATE`` for writers) or psycopg. A transaction that could make the loop wait runs in one hop
to a small pool of worker threads. One hop per transaction is about five times faster on SQLite
than aiosqlite, which hops to its thread for every statement, fetch and cursor (measured: 0.2 ms
against 1.0 ms for a two-statement transaction). On PostgreSQL, the statements of a step
(``Database.run_direct``) are sent from the loop on psycopg's asyncio connections instead
(``tarry.store.loop_connections``). Running whole transactions on the loop through SQLAlchemy's
asyncio layer, which switches greenlets at every statement inside its execution layer, was
measured side by side: 8% less time per chat, but 17% fewer answers per second at 4 at a time per
process, and more CPU per answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import logging
import os
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any, Literal, TypeVar

from sqlalchemy import create_engine, event
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError
from sqlalchemy.pool import NullPool

from tarry.errors import (
    StoreConflictError,
    StoreCorruptError,
    StoreError,
    StoreFullError,
    StoreReadOnlyError,
    StoreSchemaError,
    StoreUnavailableError,
    TarryError,
)
from tarry.store.cursor import Sendable
from tarry.store.loop_connections import LoopConnections
from tarry.store.schema import migrate, require_complete, require_usable
from tarry.tracing import function_name, span

T = TypeVar("T")
logger = logging.getLogger("tarry.store")
DEFAULT_URL = "sqlite:///tarry.db"
_DRIVERS = {
    "sqlite": "sqlite+pysqlite",
    "sqlite+pysqlite": "sqlite+pysqlite",
    "sqlite+aiosqlite": "sqlite+pysqlite",
    "postgresql": "postgresql+psycopg",
    "postgres": "postgresql+psycopg",
    "postgresql+psycopg": "postgresql+psycopg",
}
Durability = Literal["full", "fast"]
"""``"full"``: a commit survives a power cut. ``"fast"``: the last commits may be lost to one (never corrupted)."""
SQLITE_THREADS = 4
"""Worker threads per SQLite store; writers queue on the database's lock, not on the event loop."""
POSTGRES_THREADS = 10
"""Worker threads per PostgreSQL store, each keeping a connection of the pool (which has a few more to spare)."""
CHECKPOINT_EVERY = 100
"""SQLite writes on the event loop between two checkpoints of the WAL on a worker thread (a few pages each)."""


_PROACTOR: tuple[type, ...] = tuple(filter(None, [getattr(asyncio, "ProactorEventLoop", None)]))
"""The event loop Windows uses by default, on which psycopg's asyncio connections do not run."""


class UnreadableJson:
    """What a JSON column holds when its text is not JSON: the text and the parser's complaint.

    Reading a row never fails on one bad value; ``tarry.store.rows`` refuses the record it
    belongs to, naming it, so one corrupt call cannot hide the others.
    """

    def __init__(self, text: str, error: str) -> None:
        self.text = text
        self.error = error

    def __repr__(self) -> str:
        return f"UnreadableJson({self.text!r}, {self.error!r})"


def _load_json(text: str | bytes) -> Any:
    try:
        return json.loads(text)
    except ValueError as error:
        return UnreadableJson(text if isinstance(text, str) else text.decode(errors="replace"), str(error))


def database_url(url: str | None) -> URL:
    """The driver URL for ``url`` (else ``TARRY_DATABASE_URL``, else ``sqlite:///tarry.db``)."""
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


def _configure_sqlite(engine: Engine, durability: Durability) -> None:
    # In WAL mode NORMAL skips the sync at each commit: a power cut can undo the last commits.
    synchronous = "FULL" if durability == "full" else "NORMAL"

    @event.listens_for(engine, "connect")
    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we issue BEGIN ourselves
        cursor = dbapi_connection.cursor()
        if cursor.execute("PRAGMA page_count").fetchone()[0] == 0:
            # A new file (auto_vacuum takes before the first table only) gives back the pages Store.prune frees;
            # an older one keeps its mode until a VACUUM (tarry db prune --vacuum).
            cursor.execute("PRAGMA auto_vacuum=INCREMENTAL")
        for pragma in ("journal_mode=WAL", "busy_timeout=30000", f"synchronous={synchronous}", "foreign_keys=ON"):
            cursor.execute(f"PRAGMA {pragma}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def on_begin(connection: Any) -> None:
        writes = connection.get_execution_options().get("tarry_write", False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if writes else "BEGIN")


class Database:
    """The two kinds of transaction tarry uses: one write, or one consistent read."""

    def __init__(self, url: URL, durability: Durability = "full") -> None:
        if durability not in ("full", "fast"):
            raise ValueError(f"durability must be 'full' or 'fast', got {durability!r}")
        self.url = url
        self.durability = durability
        self.is_sqlite = url.get_backend_name() == "sqlite"
        self._sqlite_folder: str | None = None
        self._closed = False
        self._inline_writes = 0
        self._checkpoint_under_way: Future[None] | None = None
        self._kept_lock = threading.Lock()
        self._kept: dict[tuple[threading.Thread, bool], tuple[int, Connection]] = {}
        """Each thread's open connection and the generation it was opened in; on SQLite, one for waiting on
        locks (worker threads) or one for not (the event loop)."""
        self._generation = 0
        """Bumped by a broken connection: the server may have ended the others too, so each thread opens anew."""
        if self.is_sqlite:
            name = str(url.database or "").removeprefix("file:")
            if name in ("", ":memory:") or name.startswith(":memory:") or url.query.get("mode") == "memory":
                raise ValueError(
                    f"tarry needs a SQLite file, got the in-memory database {url.database or ''!r}: it lives in one "
                    "connection, and tarry's threads each keep their own (for a throwaway store, use a file in a "
                    "temporary folder)"
                )
            self._engine = create_engine(  # no pool: each thread keeps its own connection open (_kept_connection)
                url,
                connect_args={"timeout": 30, "check_same_thread": False},
                json_deserializer=_load_json,
                poolclass=NullPool,
            )
            _configure_sqlite(self._engine, durability)
            self._on_loop: LoopConnections | None = None
            self._threads = ThreadPoolExecutor(max_workers=SQLITE_THREADS, thread_name_prefix="tarry-sqlite")
            if url.query.get("uri") != "true":
                self._sqlite_folder = str(Path(str(url.database)).absolute().parent)
        else:
            connect_args: dict[str, Any] = {"connect_timeout": 5}
            if durability == "fast":  # commits return before the WAL reaches the disk
                given = url.query.get("options", "")
                given = given if isinstance(given, str) else " ".join(given)
                connect_args["options"] = f"{given} -c synchronous_commit=off".strip()
            self._engine = create_engine(
                url,
                pool_size=POSTGRES_THREADS,
                max_overflow=2,  # for whoever connects through sync_engine: the worker threads keep the rest
                connect_args=connect_args,
                json_deserializer=_load_json,
            )
            self._threads = ThreadPoolExecutor(max_workers=POSTGRES_THREADS, thread_name_prefix="tarry-postgres")
            from psycopg import IsolationLevel

            self._snapshot_level = IsolationLevel.REPEATABLE_READ
            """What a read runs at, to see one snapshot (writes run at the server's default)."""
            self._on_loop = LoopConnections(self._engine, partial(_connect_on_loop, self._engine, connect_args))
        self._schema_checked = False

    @property
    def where(self) -> str:
        """The database URL as the user would write it, without its password, as messages name it."""
        return self.url.set(drivername=self.url.get_backend_name()).render_as_string(hide_password=True)

    @property
    def sync_engine(self) -> Engine:
        """The SQLAlchemy ``Engine`` underneath, for listening to its events (counting statements, say)."""
        return self._engine

    async def run_write(self, work: Callable[[Connection], T], *, may_block: bool = False) -> T:
        """Run ``work`` in one write transaction (``BEGIN IMMEDIATE`` on SQLite); commit, and return its result.

        An exception raised by ``work`` rolls the whole transaction back. The first transaction
        of a database checks its schema first (``check_schema``); a database error becomes
        a [`StoreError`][tarry.errors.StoreError] that says what to do. ``may_block``: ``work`` calls the
        application's code (a ``may_decide`` policy), which may block or use a sync verb, so it runs
        on a worker thread whatever the durability.
        """
        await self.check_schema()
        return await self._run(work, write=True, may_block=may_block)

    async def run_read(self, work: Callable[[Connection], T]) -> T:
        """Run ``work`` in one read transaction that sees one snapshot (``REPEATABLE READ`` on PostgreSQL)."""
        await self.check_schema()
        return await self._run(work, write=False)

    async def run_alone(self, work: Callable[[Connection], T], *, write: bool) -> T:
        """Run ``work``, whose statements each stand alone, with no transaction around them on PostgreSQL.

        For work of one statement (or of statements that need neither one snapshot nor to commit
        together, such as ``claim_call``'s tries): on PostgreSQL each
        statement commits by itself (autocommit), which saves the round trips of ``BEGIN`` and
        ``COMMIT``; on SQLite, where those cost no round trip, it is ``run_write`` or ``run_read``.
        """
        await self.check_schema()
        return await self._run(work, write=write, alone=True)

    async def run_direct(self, work: Callable[[Sendable], T], *, write: bool) -> T:
        """Run ``work``, whose statements each stand alone and go through ``tarry.store.cursor`` only.

        On PostgreSQL they are sent right from the event loop, on a connection it keeps
        (``tarry.store.loop_connections``): no hop to a worker thread. Elsewhere (and on a proactor
        loop, Windows' default) it is ``run_alone``. Close the store before its event loop ends: a
        loop shutting down cancels the statements still under way on it.
        """
        on_loop = self._on_loop
        if on_loop is None or isinstance(asyncio.get_running_loop(), _PROACTOR):
            return await self.run_alone(work, write=write)  # psycopg's asyncio connections refuse a proactor loop
        if not self._schema_checked:
            await self.check_schema()
        if self._closed:
            raise TarryError(f"The store of {self.where} is closed")
        # What _run does, without its context managers: this is every statement of a step.
        what = {"db.system.name": "postgresql", "tarry.transaction": function_name(work)}
        try:
            with span(f"store.{'write' if write else 'read'}", what, client=True):
                return await on_loop.run(work)
        except (DBAPIError, OSError) as error:
            translated = self._store_error(error)
            if translated is None:
                raise
            raise translated from error

    async def check_schema(self) -> None:
        """Raise [`StoreSchemaError`][tarry.errors.StoreSchemaError] unless the schema is the one this tarry uses.

        Asks the database until the answer is yes, then never again.
        """
        if not self._schema_checked:
            await self._run(partial(require_usable, where=self.where), write=False)
            self._schema_checked = True

    async def check_complete(self) -> None:
        """Raise [`StoreSchemaError`][tarry.errors.StoreSchemaError] naming every table, column, index or unique
        constraint of the schema missing."""
        await self._run(partial(require_complete, where=self.where), write=False)

    async def migrate(self) -> None:
        """Create the schema or migrate it to this tarry's revision, in one write transaction."""
        await self._run(partial(migrate, where=self.where, postgres=not self.is_sqlite), write=True)
        self._schema_checked = True

    async def _run(
        self, work: Callable[[Connection], T], *, write: bool, alone: bool = False, may_block: bool = False
    ) -> T:
        if self._closed:
            raise TarryError(f"The store of {self.where} is closed")
        what = {
            "db.system.name": "sqlite" if self.is_sqlite else "postgresql",
            "tarry.transaction": function_name(work),
        }
        async with self._translated():
            with span(f"store.{'write' if write else 'read'}", what, client=True):
                if self.is_sqlite and not may_block and (not write or self.durability == "fast"):
                    if write:
                        await self._checkpointed()
                    result = self._sqlite_inline(work, write=write)
                    if not isinstance(result, _Busy):
                        return result
                    # Another process holds the lock: wait for it on a worker thread instead.
                cancelled = threading.Event()
                transaction = self._sqlite_transaction if self.is_sqlite else self._postgres_transaction
                run = partial(transaction, work, cancelled, write=write, alone=alone)
                try:  # in the caller's context, so a tracer's current span reaches the thread
                    return await asyncio.get_running_loop().run_in_executor(
                        self._threads, contextvars.copy_context().run, run
                    )
                except asyncio.CancelledError:
                    cancelled.set()  # the thread goes on; a transaction it has not committed yet rolls back
                    raise

    def _sqlite_inline(self, work: Callable[[Connection], T], *, write: bool) -> T | _Busy:
        """Run ``work`` in one transaction right here, on the event loop, unless it would have to wait.

        A SQLite transaction that waits neither for another process's lock nor for the disk
        (a read, or a write whose commit does not sync) takes less time than handing it to a
        worker thread and back. Its connection does not wait for locks: a busy database gives
        ``_Busy`` at once, before anything was written, and the caller runs the transaction
        on a worker thread. Nor does it checkpoint the WAL, which syncs the database file: every
        ``CHECKPOINT_EVERY`` writes here, a worker thread does.
        """
        connection = self._kept_connection(waits=False).execution_options(tarry_write=write)
        try:
            with connection.begin():
                result = work(connection)
        except DBAPIError as error:
            if _sqlite_busy(error.orig):
                return _Busy()
            raise
        if write:
            self._inline_writes += 1
            if self._inline_writes % CHECKPOINT_EVERY == 0:
                with contextlib.suppress(RuntimeError):  # the store is closing: no thread takes new work
                    self._checkpoint_under_way = self._threads.submit(self._checkpoint)
        return result

    async def _checkpointed(self) -> None:
        """Let a checkpoint under way end before the next write on the loop: that write then restarts the WAL
        from its beginning, which it cannot while frames are left to copy."""
        checkpoint, self._checkpoint_under_way = self._checkpoint_under_way, None
        if checkpoint is not None:
            await asyncio.wrap_future(checkpoint)

    def _checkpoint(self) -> None:
        try:
            _driver(self._kept_connection(waits=True)).execute("PRAGMA wal_checkpoint(PASSIVE)")
        except Exception:  # the next one tries again; meanwhile the WAL grows a little
            logger.warning("Checkpointing the SQLite WAL of %s failed", self.where, exc_info=True)

    def _sqlite_transaction(
        self, work: Callable[[Connection], T], cancelled: threading.Event, *, write: bool, alone: bool
    ) -> T:
        """Run ``work`` in one transaction on the worker thread's own connection (``alone`` costs nothing here)."""
        connection = self._kept_connection(waits=True).execution_options(tarry_write=write)
        with connection.begin():
            return _unless_cancelled(work(connection), cancelled)

    def _postgres_transaction(
        self, work: Callable[[Connection], T], cancelled: threading.Event, *, write: bool, alone: bool
    ) -> T:
        """Run ``work`` on the worker thread's connection: in one transaction, or ``alone`` with each statement
        committing."""
        connection = self._kept_connection(waits=True)
        # Set on the driver's connection: SQLAlchemy's isolation_level option would keep a note on a connection
        # that never goes back to the pool at every transaction.
        driver = _driver(connection)
        driver.autocommit = alone
        driver.isolation_level = None if write or alone else self._snapshot_level
        with connection.begin():  # alone, this sends nothing: it ends the transaction object SQLAlchemy begins
            return work(connection) if alone else _unless_cancelled(work(connection), cancelled)

    def _kept_connection(self, *, waits: bool) -> Connection:
        """The calling thread's own connection, kept open between transactions (no pool checkout each time).

        On SQLite, one that ``waits`` for locks or one that does not, opened if the thread has none yet.

        Opening one closes those of threads that have ended (a sync caller's, say), which nothing can be using.
        """
        thread, generation = threading.current_thread(), self._generation
        kept = self._kept.get((thread, waits))
        if kept is not None and kept[0] == generation and not kept[1].invalidated and not kept[1].closed:
            return kept[1]
        with self._kept_lock:  # the old one goes back first: PostgreSQL's pool has a connection per worker thread
            ended = [key for key in self._kept if not key[0].is_alive() or key == (thread, waits)]
            gone = [self._kept.pop(key) for key in ended]
        for opened_in, old in gone:
            if opened_in != generation and not old.invalidated and not old.closed:
                old.invalidate()  # not back to the pool, which would hand the same connection out again
            old.close()
        connection = self._engine.connect()
        if not waits:  # nor for the disk: its commits leave checkpoints (which sync the file) to a worker thread
            driver = _driver(connection)
            driver.execute("PRAGMA busy_timeout=0")
            driver.execute("PRAGMA wal_autocheckpoint=0")
        with self._kept_lock:
            self._kept[thread, waits] = generation, connection
        return connection

    @asynccontextmanager
    async def _translated(self) -> AsyncIterator[None]:
        """Turn the driver's errors into [`StoreError`][tarry.errors.StoreError] types that say what to do."""
        if self._sqlite_folder is not None:
            self._check_sqlite_folder(self._sqlite_folder)
        try:
            yield
        except (DBAPIError, OSError) as error:
            translated = self._store_error(error)
            if translated is None:
                raise
            raise translated from error

    def _store_error(self, error: DBAPIError | OSError) -> StoreError | None:
        """The [`StoreError`][tarry.errors.StoreError] a driver's error means, if tarry knows it; a broken connection,
        or one that answered read-only or full, is forgotten with all the others."""
        if isinstance(error, OSError):
            return StoreUnavailableError(f"Cannot reach the database at {self.where}: {error}")
        translated = store_error(
            error.orig,
            self.where,
            invalidated=error.connection_invalidated,
            read_only_file=(
                self.is_sqlite
                and _sqlite_code(error.orig) == sqlite3.SQLITE_CANTOPEN  # only then: it reads the file system
                and _not_writable(str(self.url.database or ""))
            ),
        )
        if error.connection_invalidated or isinstance(translated, StoreReadOnlyError | StoreFullError):
            # A connection that answered read-only (to a server that failover demoted, say) or full may keep
            # answering so: every connection is replaced, and the next transaction opens a new one.
            self._generation += 1
            if self._on_loop is not None:
                self._on_loop.forget()
            if not error.connection_invalidated and not self.is_sqlite:
                self._engine.dispose()  # the pool's idle connections too; those in use are not handed out again
        return translated

    def _check_sqlite_folder(self, folder: str) -> None:
        """Fail clearly, once, when the SQLite file's folder does not exist."""
        if not os.path.isdir(folder):
            raise StoreUnavailableError(
                f"Cannot reach the database at {self.where}: the folder {folder} does not exist"
            )
        self._sqlite_folder = None

    async def dispose(self) -> None:
        """Close every connection and stop the worker threads; no transaction starts from now on.

        Cancelled meanwhile, it still closes them: the worker threads' from a thread of its own once the
        workers are done, the event loop's as their statements end.
        """
        if self._closed:
            return
        self._closed = True
        closing = threading.Thread(target=self._close_when_idle, name="tarry-close", daemon=True)
        closing.start()
        if self._on_loop is not None:  # shielded: it closes the loop's connections as their statements end
            await asyncio.shield(self._on_loop.close())
        await asyncio.to_thread(closing.join)

    def _close_when_idle(self) -> None:
        # A transaction still running in a worker thread ends before its connection is closed:
        # closing a SQLite connection under a running statement crashes the process.
        self._threads.shutdown(wait=True)
        with self._kept_lock:
            kept, self._kept = [connection for _, connection in self._kept.values()], {}
        for connection in kept:
            connection.close()
        self._engine.dispose()


async def _connect_on_loop(engine: Engine, connect_args: dict[str, Any]) -> Any:
    """A psycopg asyncio connection to ``engine``'s database, set up as the engine sets its own up (the same
    JSON loads and dumps), each statement committing by itself."""
    from psycopg import AsyncConnection, Error

    arguments, keywords = engine.dialect.create_connect_args(engine.url)
    try:
        return await AsyncConnection.connect(*arguments, **{**keywords, **connect_args, "autocommit": True})
    except Error as error:  # as the engine's own connect would raise it, for _translated
        raise DBAPIError.instance(None, None, error, Error, dialect=engine.dialect) from error


def _driver(connection: Connection) -> Any:
    """The driver's own connection under an open SQLAlchemy ``connection`` (sqlite3's or psycopg's)."""
    driver = connection.connection.driver_connection
    assert driver is not None  # an open connection always has one
    return driver


class _Busy:
    """What ``Database._sqlite_inline`` gives when another process held the lock it would have waited for."""


class _Cancelled(Exception):
    """Rolls back a transaction whose caller was cancelled before it committed."""


def _unless_cancelled(result: T, cancelled: threading.Event) -> T:
    if cancelled.is_set():
        raise _Cancelled
    return result


_SCHEMA_PHRASES = ("no such table", "no such column", "has no column named")
_SQLSTATES = {
    "53100": "full",
    "25006": "read_only",
    "XX001": "corrupt",
    "XX002": "corrupt",
    "42P01": "schema",
    "42703": "schema",
    "40P01": "conflict",
    "40001": "conflict",
}
_SQLITE_CODES = {
    sqlite3.SQLITE_FULL: "full",
    sqlite3.SQLITE_READONLY: "read_only",
    sqlite3.SQLITE_CORRUPT: "corrupt",
    sqlite3.SQLITE_NOTADB: "corrupt",
}
_KINDS: dict[str, tuple[type[StoreError], str, str]] = {
    "full": (
        StoreFullError,
        "is full",
        "Free space on the disk that holds it (or raise its size limit) and try again; the failed write saved nothing.",
    ),
    "read_only": (
        StoreReadOnlyError,
        "refuses to be written",
        "Give this process write access (for SQLite: to the file and to its folder, which holds the journal), "
        "or point tarry at a writable database.",
    ),
    "corrupt": (
        StoreCorruptError,
        "is damaged or not a database",
        "Restore it from a backup; for SQLite, `sqlite3 FILE .recover` may rescue what is left.",
    ),
    "conflict": (
        StoreConflictError,
        "ended this write to resolve a conflict with another transaction",
        "It saved nothing: try it again.",
    ),
    "schema": (
        StoreSchemaError,
        "lacks a table or column this tarry uses",
        "Migrate it with `tarry db upgrade` (with --url URL unless TARRY_DATABASE_URL names it); if that finds "
        "nothing to do, the tables were changed by hand: restore them from a backup.",
    ),
}


def store_error(
    orig: BaseException | None, where: str, *, invalidated: bool = False, read_only_file: bool = False
) -> StoreError | None:
    """The [`StoreError`][tarry.errors.StoreError] a driver's exception means, or ``None`` when it is none of them.

    PostgreSQL's SQLSTATE and SQLite's result code decide; the driver's own words follow in parentheses.
    ``read_only_file``: the SQLite file (or its folder, which holds the WAL) cannot be written, so SQLite's
    "unable to open database file" means read-only, not out of reach.
    """
    reason = _reason(orig)
    if reason is None and read_only_file and _sqlite_code(orig) == sqlite3.SQLITE_CANTOPEN:
        reason = "read_only"
    if reason is not None:
        kind, what, advice = _KINDS[reason]
        said = getattr(getattr(orig, "diag", None), "message_primary", None) or orig  # psycopg's, without the SQL
        return kind(f"The database at {where} {what} ({said}). {advice}")
    if _is_connect_error(orig):
        return StoreUnavailableError(f"Cannot reach the database at {where}: {orig}")
    if invalidated:
        return StoreUnavailableError(
            f"The connection to the database at {where} broke ({str(orig).strip()}). Try again: the next "
            "transaction opens a new connection; if it fails too, check that the server is running."
        )
    return None


def _sqlite_busy(orig: BaseException | None) -> bool:
    """Whether SQLite refused because another connection holds a lock (``SQLITE_BUSY`` or ``SQLITE_LOCKED``)."""
    return _sqlite_code(orig) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


def _sqlite_code(orig: BaseException | None) -> int | None:
    """SQLite's primary result code under the extended one an error carries, if it is SQLite's."""
    code = getattr(orig, "sqlite_errorcode", None)
    return code & 0xFF if isinstance(code, int) else None


def _not_writable(database: str) -> bool:
    """Whether an existing SQLite file, or the folder that holds its WAL, cannot be written (a read-only file
    system, or permissions)."""
    path = Path(database.removeprefix("file:").split("?")[0]).absolute()
    try:
        if not path.is_file():
            return False
        if hasattr(os, "statvfs") and os.statvfs(path).f_flag & os.ST_RDONLY:  # no statvfs on Windows
            return True
    except OSError:
        return False
    return not (os.access(path, os.W_OK) and os.access(path.parent, os.W_OK))


def _reason(orig: BaseException | None) -> str | None:
    state = getattr(orig, "sqlstate", None)
    if state in _SQLSTATES:
        return _SQLSTATES[state]
    code = _sqlite_code(orig)
    if code in _SQLITE_CODES:
        return _SQLITE_CODES[code]
    if isinstance(orig, sqlite3.OperationalError) and any(phrase in str(orig) for phrase in _SCHEMA_PHRASES):
        return "schema"
    return None


def _is_connect_error(orig: BaseException | None) -> bool:
    text = str(orig).lower()
    phrases = (
        "connection refused",
        "could not connect",
        "unable to open database",
        "timeout expired",
        "connection failed",
        "name or service not known",
        "no such host",
    )
    return any(phrase in text for phrase in phrases)
