"""Which schema revision a database holds, whether this tarry can use it, and migrating it (Alembic)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from sqlalchemy import Connection, String, Table, UniqueConstraint, column, inspect, select, table, text
from sqlalchemy.engine.reflection import Inspector

from tarry.errors import StoreSchemaError
from tarry.store.audit import TRAIL_TABLE
from tarry.store.tables import metadata

HEAD = "0020"
"""The revision the migrations end at, so opening a store needs no Alembic; a test keeps it equal to Alembic's head."""
MIGRATIONS = Path(__file__).parent / "migrations"
_VERSIONS = table("alembic_version", column("version_num", String))
_UPGRADE = "`tarry db upgrade` (with --url URL unless TARRY_DATABASE_URL names it) or `await store.setup()`"


def read_revision(connection: Connection) -> str | None:
    """The schema revision the database records, or ``None`` when it has no tarry schema."""
    if not inspect(connection).has_table(_VERSIONS.name):
        return None
    revision: str | None = connection.scalar(select(_VERSIONS.c.version_num))
    return revision


def require_usable(connection: Connection, where: str) -> None:
    """Raise [`StoreSchemaError`][tarry.errors.StoreSchemaError], saying what to do, unless the schema is the one this
    tarry uses."""
    found = read_revision(connection)
    if found == HEAD:
        return
    known = known_revisions()
    if found is not None and found == known[0]:  # HEAD lags a new migration: Alembic is the judge
        return
    if found is None:
        raise StoreSchemaError(f"The database at {where} has no tarry tables: create them with {_UPGRADE}.")
    if found in known:
        raise StoreSchemaError(
            f"The database at {where} has tarry's schema at revision {found}, and this tarry needs {known[0]}: "
            f"migrate it with {_UPGRADE}."
        )
    raise _too_new(found, where)


def missing_parts(connection: Connection) -> list[str]:
    """What the schema of this tarry's revision has and the database lacks: tables, columns, indexes, unique keys
    and, on PostgreSQL, the trail's triggers.

    Parts the database has beyond these are no concern (an index an operator added, say).
    """
    found = inspect(connection)
    tables = set(found.get_table_names())
    missing: list[str] = []
    for expected in metadata.sorted_tables:
        if expected.name in tables:
            missing += _missing_of_table(found, expected)
        else:
            missing.append(f"table {expected.name}")
    if connection.dialect.name == "postgresql" and TRAIL_TABLE in tables:  # a missing table's triggers go with it
        present = set(connection.scalars(_TRIGGERS))
        missing += [f"trigger {name}" for name in TRIGGERS if name not in present]
    if "tarry_questions" in tables:
        present = set(connection.scalars(_NOTICE_TRIGGERS[connection.dialect.name == "postgresql"]))
        missing += [f"trigger {name}" for name in NOTICE_TRIGGERS if name not in present]
    return missing


def _missing_of_table(found: Inspector, expected: Table) -> list[str]:
    """What the database's table lacks of ``expected``: columns, indexes and unique keys."""
    name = expected.name
    columns = {described["name"] for described in found.get_columns(name)}
    missing = [f"column {name}.{wanted.name}" for wanted in expected.columns if wanted.name not in columns]
    indexes = found.get_indexes(name)
    names = {described["name"] for described in indexes}
    missing += [f"index {wanted.name}" for wanted in expected.indexes if wanted.name not in names]
    # A unique constraint is known by its columns: some have no name of tarry's, and PostgreSQL
    # reports a constraint's index among the indexes too.
    unique: set[frozenset[str | None]] = {
        frozenset(described["column_names"]) for described in found.get_unique_constraints(name)
    }
    unique |= {frozenset(described["column_names"]) for described in indexes if described["unique"]}
    missing += [
        f"unique constraint on {name}({', '.join(wanted.columns.keys())})"
        for wanted in expected.constraints
        if isinstance(wanted, UniqueConstraint) and frozenset(wanted.columns.keys()) not in unique
    ]
    return missing


TRIGGERS = ("tarry_trail_append", "tarry_trail_refuse", "tarry_trail_refuse_truncate")
"""PostgreSQL: the triggers on the trail that chain each row tarry appends and refuse to change or remove rows."""
_TRIGGERS = text("SELECT tgname FROM pg_trigger WHERE NOT tgisinternal AND tgrelid = to_regclass(:trail)").bindparams(
    trail=TRAIL_TABLE
)

NOTICE_TRIGGERS = ("tarry_notice_asked", "tarry_notice_decided", "tarry_notice_reminded", "tarry_notice_escalated")
"""The triggers on the questions that write the notice of a question asked, decided or cancelled (the outbox)."""
_NOTICE_TRIGGERS = (
    text("SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'tarry_questions'"),
    text("SELECT tgname FROM pg_trigger WHERE NOT tgisinternal AND tgrelid = to_regclass('tarry_questions')"),
)


def require_complete(connection: Connection, where: str) -> None:
    """Raise [`StoreSchemaError`][tarry.errors.StoreSchemaError] naming each part of this tarry's schema that the
    database lacks."""
    missing = missing_parts(connection)
    if missing:
        raise StoreSchemaError(
            f"The database at {where} records tarry's schema revision {read_revision(connection)} but lacks "
            f"{len(missing)} of its parts (removed by hand, or restored in part?):\n"
            + "".join(f"  missing {part}\n" for part in missing)
            + "`tarry db upgrade` does not add them back to a database at its revision: restore it from a backup."
        )


def migrate(connection: Connection, where: str, *, postgres: bool) -> None:
    """Create the schema, or migrate it to this tarry's revision; a schema newer than this tarry is refused."""
    from alembic import command
    from alembic.config import Config

    if postgres:  # one process migrates at a time
        connection.execute(text("SELECT pg_advisory_xact_lock(7413265)"))
    found = read_revision(connection)
    if found is not None and found not in known_revisions():
        raise _too_new(found, where)
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    command.upgrade(config, "head")


@cache
def known_revisions() -> tuple[str, ...]:
    """Every revision of the migrations, newest first (Alembic reads the scripts once per process)."""
    from alembic.script import ScriptDirectory

    return tuple(script.revision for script in ScriptDirectory(str(MIGRATIONS)).walk_revisions())


def _too_new(found: str, where: str) -> StoreSchemaError:
    return StoreSchemaError(
        f"The database at {where} has schema revision {found!r}, which this tarry does not know: a newer tarry "
        "migrated it. Upgrade tarry (pip install -U tarry) in every process that uses this database."
    )
