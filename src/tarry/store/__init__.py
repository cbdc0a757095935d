"""Persisted chats: SQLite by default, PostgreSQL at scale (``tarry[postgres]``)."""

from tarry.errors import StoreUnavailableError
from tarry.store.audit import DecisionEvent, TrailBreak
from tarry.store.follow_ups import FollowedUp
from tarry.store.outbox import DeliveryRecord
from tarry.store.paging import QuestionPage
from tarry.store.problems import Problem
from tarry.store.prune import PruneReport
from tarry.store.slack import SlackMessage
from tarry.store.store import Store

__all__ = [
    "DecisionEvent",
    "DeliveryRecord",
    "FollowedUp",
    "Problem",
    "PruneReport",
    "QuestionPage",
    "SlackMessage",
    "Store",
    "StoreUnavailableError",
    "TrailBreak",
]
