"""Databases for the bridge tests: the store tests' SQLite file and PostgreSQL schema fixtures."""

from __future__ import annotations

from tests.store.conftest import database_url, finance, postgres_url, store

__all__ = ["database_url", "finance", "postgres_url", "store"]
