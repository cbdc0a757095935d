"""Databases for the jobs tests: the store tests' SQLite file and PostgreSQL schema fixtures."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.store.conftest import _postgres_schema_url, database_url, store

__all__ = ["database_url", "postgres_url", "store"]


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A fresh PostgreSQL schema (skips without TARRY_TEST_POSTGRES_URL)."""
    yield from _postgres_schema_url()
