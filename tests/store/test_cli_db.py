"""``tarry db upgrade`` and ``tarry db check`` from the shell; ``tarry worker`` and ``serve`` refuse a bad database."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tarry.cli.exits import Exit
from tarry.store import Store
from tests.store.test_corrupt_rows import TAMPERINGS, tamper
from tests.store.test_database_errors import FUTURE, sql
from tests.store.test_store import park

ROOT = Path(__file__).resolve().parents[2]


def tarry(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", "from tarry.cli import main; raise SystemExit(main())", *args]
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    return subprocess.run(command, cwd=cwd, env=environment, capture_output=True, text=True, timeout=120, check=False)


async def test_db_upgrade_creates_the_schema_once_and_again(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    for _ in range(2):
        done = tarry("db", "upgrade", "--url", url, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert "has the current schema" in done.stdout
    async with Store(url) as store:
        assert await store.pending_questions() == []


async def test_db_upgrade_uses_tarry_db_in_the_working_directory(tmp_path: Path) -> None:
    done = tarry("db", "upgrade", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "tarry.db").exists()


def test_db_without_a_subcommand_fails_with_usage(tmp_path: Path) -> None:
    done = tarry("db", cwd=tmp_path)
    assert done.returncode == 2
    assert "upgrade" in done.stderr


async def test_db_check_names_each_corrupt_call_and_fails(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    async with Store(url) as store:
        await store.setup()
        broken = await park(store)
        await park(store)
        done = tarry("db", "check", "--url", url, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert "has the current schema" in done.stdout and "Every open call can be read." in done.stdout
        table, column, name, value, said = TAMPERINGS["a task status not in the list"]
        call_id = await tamper(store, broken, name, table, column, value)
    done = tarry("db", "check", "--url", url, cwd=tmp_path)
    assert done.returncode == 1
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("Corrupt:")]
    assert f"chat {broken}, call {call_id}: " in line and said in line
    assert "1 open call(s) cannot be read" in done.stdout


async def test_db_check_names_each_missing_part_of_the_schema_and_exits_7(database_url: str, tmp_path: Path) -> None:
    async with Store(database_url) as store:
        await store.setup()
    done = tarry("db", "check", "--url", database_url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    sql(database_url, "DROP TABLE tarry_decision_events")
    sql(database_url, "DROP INDEX ix_tarry_chats_next_check")
    sql(database_url, "ALTER TABLE tarry_chats DROP COLUMN instructions")
    for command in (("db", "check"), ("worker", "--agents", "tests.jobs.tools:clerk")):
        done = tarry(*command, "--url", database_url, cwd=tmp_path)
        assert done.returncode == Exit.DATABASE, (command, done.stdout, done.stderr)
        assert "records tarry's schema revision" in done.stderr and "lacks 3 of its parts" in done.stderr, command
        missing = sorted(line.strip() for line in done.stderr.splitlines() if line.startswith("  missing "))
        assert missing == [
            "missing column tarry_chats.instructions",
            "missing index ix_tarry_chats_next_check",
            "missing table tarry_decision_events",
        ], command
        assert "restore it from a backup" in done.stderr and "Traceback" not in done.stderr, command
        assert "has the current schema" not in done.stdout and "carrying on chats" not in done.stdout, command


async def test_db_check_names_a_missing_unique_constraint(postgres_url: str, tmp_path: Path) -> None:
    async with Store(postgres_url) as store:
        await store.setup()
    sql(postgres_url, "ALTER TABLE tarry_messages DROP CONSTRAINT uq_tarry_messages_chat_position")
    done = tarry("db", "check", "--url", postgres_url, cwd=tmp_path)
    assert done.returncode == 7, done.stderr
    assert "  missing unique constraint on tarry_messages(chat_id, position)" in done.stderr.splitlines()


def test_db_check_and_the_worker_refuse_a_database_never_set_up(tmp_path: Path) -> None:
    missing, empty = tmp_path / "never.db", tmp_path / "empty.db"
    empty.write_bytes(b"")
    for command in (("db", "check"), ("worker", "--agents", "tests.jobs.tools:clerk")):
        done = tarry(*command, "--url", f"sqlite:///{missing}", cwd=tmp_path)
        assert done.returncode == Exit.DATABASE
        assert f"no database file at {missing}; `tarry db upgrade --url" in done.stderr
        assert not missing.exists()  # looking creates nothing
        done = tarry(*command, "--url", f"sqlite:///{empty}", cwd=tmp_path)
        assert done.returncode == Exit.DATABASE
        assert "no tarry tables: create them with `tarry db upgrade`" in done.stderr
        assert "Traceback" not in done.stderr and "carrying on chats" not in done.stdout


async def test_a_schema_newer_than_this_tarry_stops_every_command_before_it_starts(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'newer.db'}"
    async with Store(url) as store:
        await store.setup()
    sql(url, f"UPDATE alembic_version SET version_num = '{FUTURE}'")
    for command in (
        ("db", "upgrade"),
        ("db", "check"),
        ("worker", "--agents", "tests.jobs.tools:clerk"),
        ("serve", "--port", "0"),
    ):
        done = tarry(*command, "--url", url, cwd=tmp_path)
        assert done.returncode == Exit.DATABASE, command
        assert f"revision '{FUTURE}', which this tarry does not know" in done.stderr, command
        assert "Traceback" not in done.stderr and "login" not in done.stdout, command


def test_serve_refuses_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    path = tmp_path / "tarry.db"
    path.write_bytes(b"not a database " * 100)
    done = tarry("serve", "--url", f"sqlite:///{path}", "--port", "0", cwd=tmp_path)
    assert done.returncode == Exit.DATABASE
    assert "is damaged or not a database" in done.stderr and "Restore it from a backup" in done.stderr
    assert "login" not in done.stdout
