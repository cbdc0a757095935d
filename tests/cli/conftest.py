"""The CLI tests' databases (a SQLite file, then a PostgreSQL schema) and a way to run ``tarry`` as a user does."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import tarry
from tests.store.conftest import _postgres_schema_url, database_url, store

__all__ = ["_postgres_schema_url", "database_url", "store"]

HERE = Path(__file__).parent


def tarry_command() -> str:
    """The installed ``tarry`` console script."""
    beside_python = Path(sys.executable).with_name("tarry")
    found = str(beside_python) if beside_python.exists() else shutil.which("tarry")
    assert found, "the tarry console script is not installed: run pip install -e ."
    return found


TARRY_SOURCE = str(Path(tarry.__file__).resolve().parents[1])
"""The tarry these tests import, whichever checkout that is (a worktree's, not only the installed one's)."""


def user_environment(**extra: str) -> dict[str, str]:
    """The environment of a user's shell: UTF-8 output, a real terminal type, and no PYTHONPATH but the one that
    makes ``tarry`` run the tarry under test."""
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "TARRY_DATABASE_URL")}
    env["PYTHONPATH"] = TARRY_SOURCE
    return {**env, "PYTHONIOENCODING": "utf-8", "TERM": "xterm-256color", "COLUMNS": "200", **extra}


def tarry(*arguments: str, cwd: Path | None = None, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``tarry ARGUMENTS`` in a real process and wait for it."""
    return subprocess.run(
        [tarry_command(), *arguments],
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        env=user_environment(),
        check=False,
    )


def start_tarry(arguments: Sequence[str], cwd: Path | None = None) -> subprocess.Popen[str]:
    """Start ``tarry ARGUMENTS`` without waiting for it."""
    return subprocess.Popen(
        [tarry_command(), *arguments],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=user_environment(),
    )
