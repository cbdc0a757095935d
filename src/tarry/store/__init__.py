"""Persisted chats: SQLite by default, PostgreSQL at scale (``tarry[postgres]``)."""

from tarry.errors import StoreUnavailableError
from tarry.store.store import Store

__all__ = ["Store", "StoreUnavailableError"]
