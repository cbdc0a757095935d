"""``tarry db upgrade`` from the shell."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tarry.store import Store


def tarry(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", "from tarry.cli import main; raise SystemExit(main())", *args]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


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
