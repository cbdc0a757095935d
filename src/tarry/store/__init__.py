"""Persisted chats: SQLite by default, PostgreSQL at scale (``tarry[postgres]``)."""

from tarry.errors import StoreUnavailableError
from tarry.store.audit import DecisionEvent
from tarry.store.paging import QuestionPage
from tarry.store.problems import Problem
from tarry.store.served_tasks import ServedTask, ServedTasks
from tarry.store.store import Store
from tarry.store.stream_events import StreamEvent, StreamEvents

__all__ = [
    "DecisionEvent",
    "Problem",
    "QuestionPage",
    "ServedTask",
    "ServedTasks",
    "Store",
    "StoreUnavailableError",
    "StreamEvent",
    "StreamEvents",
]
