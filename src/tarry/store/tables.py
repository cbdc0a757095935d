"""The store's tables (SQLAlchemy Core). Migrations under ``migrations/`` create and change them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Dialect,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    false,
    literal_column,
)
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.types import TypeDecorator

metadata = MetaData()
Json = JSON(none_as_null=True)
"""Plain JSON on every database: PostgreSQL's JSONB would reorder keys, and arguments are kept as sent.

``None`` is written as SQL NULL, not as the JSON text ``null``: reading it back costs no parse.
"""
Id = BigInteger().with_variant(Integer(), "sqlite")
LARGEST_ID = 2**63 - 1
"""The largest number an ``Id`` column holds, on either database."""


class UTCDateTime(TypeDecorator[datetime]):
    """Aware UTC datetimes on every database (SQLite keeps naive text, so values are normalised)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"Refusing to store a naive datetime: {value!r}")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if not isinstance(value, datetime):
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


chats = Table(
    "tarry_chats",
    metadata,
    Column("id", String(36), primary_key=True),
    Column("model", String(200)),
    Column("agent", String(200)),
    Column("instructions", Text),
    Column("tool_choice", String(200)),
    Column("settings", Json, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("claimed_by", String(120)),
    Column("claimed_until", UTCDateTime),
    # Change tracking (0003): every write that changes what a chat object holds bumps ``version``, so a
    # process that saw the current version skips re-reading; ``message_count`` hands out message positions.
    Column("version", Integer, nullable=False, default=0, server_default="0"),
    Column("message_count", Integer, nullable=False, default=0, server_default="0"),
    # Background work (0002): when a worker should next look at the chat, a counter bumped by every
    # change of that schedule (so a worker's late write cannot undo a newer wake), and a cancellation request.
    Column("next_check_at", UTCDateTime),
    Column("schedule_version", Integer, nullable=False, default=0, server_default="0"),
    Column("cancel_requested_at", UTCDateTime),
    Index("ix_tarry_chats_next_check", "next_check_at"),
)

messages = Table(
    "tarry_messages",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("chat_id", String(36), ForeignKey("tarry_chats.id", ondelete="CASCADE"), nullable=False),
    Column("position", Integer, nullable=False),
    Column("role", String(16), nullable=False),
    Column("content", Text, nullable=False),
    Column("tool_calls", Json),
    Column("tool_call_id", String(200)),
    Column("usage", Json),
    Column("created_at", UTCDateTime, nullable=False),
    # Provider state (0004): what an adapter needs back with this message on the next request, keyed
    # by provider (Anthropic's thinking blocks); a tool call's own sits in its entry of ``tool_calls``.
    Column("provider_data", Json),
    UniqueConstraint("chat_id", "position", name="uq_tarry_messages_chat_position"),
)

tool_calls = Table(
    "tarry_tool_calls",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("chat_id", String(36), ForeignKey("tarry_chats.id", ondelete="CASCADE"), nullable=False),
    Column("message_position", Integer, nullable=False),
    Column("call_id", String(200), nullable=False),
    Column("name", String(200), nullable=False),
    Column("arguments", Json, nullable=False),
    Column("needs_approval", Boolean, nullable=False),
    Column("state", Json),
    Column("waiting_on", Json),
    Column("version", Integer, nullable=False, default=0),
    Column("claimed_by", String(120)),
    Column("claimed_until", UTCDateTime),
    Column("result_message_id", Id, ForeignKey("tarry_messages.id")),
    Column("created_at", UTCDateTime, nullable=False),
    # Bridged runs (0019): the run of a decided call's tool by another framework, in a model turn (a bridge): NULL
    # until it starts, then {"started_at"}, then with "finished_at" and "result" (tarry.live.EarlierRun).
    Column("ran", Json),
    UniqueConstraint("chat_id", "call_id", name="uq_tarry_tool_calls_chat_call"),
    Index("ix_tarry_tool_calls_chat_position", "chat_id", "message_position"),
    # Pruning (0014): deleting a message looks up the calls whose result it is.
    Index("ix_tarry_tool_calls_result", "result_message_id"),
    Index(
        "ix_tarry_tool_calls_open",
        "chat_id",
        sqlite_where=Column("result_message_id").is_(None),
        postgresql_where=Column("result_message_id").is_(None),
    ),
)


def constant(value: int | str) -> ColumnElement[Any]:
    """``value`` written into a statement's SQL instead of sent with it: no parameter for the driver to convert at
    each execution, and a shorter statement (psycopg keeps the parsed form of one up to 4 kB only)."""
    if isinstance(value, int):
        return literal_column(str(int(value)), Integer)
    return literal_column("'" + value.replace("'", "''") + "'", String)


OPEN_BY_KEY = tool_calls.c.result_message_id.is_(None).is_(True)
"""Open, in a statement that finds its call by id: ``result_message_id IS NULL``, written so that PostgreSQL cannot
take the partial index of open calls for it (see ``UNDECIDED_BY_KEY``)."""

questions = Table(
    "tarry_questions",
    metadata,
    Column("id", String(36), primary_key=True),
    Column("chat_id", String(36), ForeignKey("tarry_chats.id", ondelete="CASCADE"), nullable=False),
    # A question of the chat itself (0008: an MCP server's first login, before any call) has no tool call.
    Column("tool_call_id", Id, ForeignKey("tarry_tool_calls.id", ondelete="CASCADE")),
    Column("number", Integer, nullable=False),
    Column("kind", String(16), nullable=False),
    Column("message", Text, nullable=False),
    Column("requested_schema", Json),
    Column("url", Text),
    Column("source", String(200)),
    Column("key", String(200)),
    Column("extra", Json),
    Column("asked_at", UTCDateTime, nullable=False),
    Column("expires_at", UTCDateTime),
    Column("decision", String(16)),
    Column("answer", Json),
    Column("note", Text),
    Column("decided_at", UTCDateTime),
    # Accountable decisions (0007): the approval policy, the approvals counted so far, and who decided through what.
    Column("policy", Json),
    Column("votes", Json),
    Column("decided_by", String(200)),
    Column("decided_by_name", String(200)),
    Column("channel", String(16)),
    # Follow-ups (0016): when the approval policy's next reminder, escalation or decline on timeout is due, and
    # when the question was reminded and escalated.
    Column("follow_up_at", UTCDateTime),
    Column("reminded_at", UTCDateTime),
    Column("escalated_at", UTCDateTime),
    # Seen proposals (0018): the digest of the arguments a call's approval proposes now (Question.proposal_digest).
    Column("digest", String(64)),
    Index("ix_tarry_questions_call", "tool_call_id"),
    Index(
        "ix_tarry_questions_follow_up",
        "follow_up_at",
        sqlite_where=Column("decision").is_(None) & Column("follow_up_at").is_not(None),
        postgresql_where=Column("decision").is_(None) & Column("follow_up_at").is_not(None),
    ),
    # Pruning (0014): deleting a chat deletes its questions (and its served tasks) by chat.
    Index("ix_tarry_questions_chat", "chat_id"),
    # Listing order (0010): the undecided questions of calls by (call, number), a chat's own by (number, id).
    Index(
        "ix_tarry_questions_undecided",
        "tool_call_id",
        "number",
        sqlite_where=Column("decision").is_(None),
        postgresql_where=Column("decision").is_(None),
    ),
    Index(
        "ix_tarry_questions_own_undecided",
        "number",
        "id",
        sqlite_where=Column("tool_call_id").is_(None) & Column("decision").is_(None),
        postgresql_where=Column("tool_call_id").is_(None) & Column("decision").is_(None),
    ),
    Index(
        "ix_tarry_questions_of_chat",
        "chat_id",
        sqlite_where=Column("tool_call_id").is_(None),
        postgresql_where=Column("tool_call_id").is_(None),
    ),
)

UNDECIDED_BY_KEY = questions.c.decision.is_(None).is_(True)
"""Undecided, in a statement that finds its questions by a key (their id, their call's): ``decision IS NULL``,
written so that PostgreSQL cannot take the partial indexes of undecided questions for it.

From ``decision IS NULL`` the planner proves those indexes' condition, and in a cached generic plan (psycopg
prepares a statement sent often), with the statistics of a young table, it rated reading all of such an index as
cheap as looking the key up: each decision then read an entry of every waiting question. The listings, which
page through those indexes, keep ``decision IS NULL``. tests/store/test_query_plans.py checks the plans: should
a later PostgreSQL see through ``IS TRUE``, it fails there.
"""

# OAuth for MCP servers (0005): one login (tokens and client registration) per server and identity,
# shared by every process, and the logins a person has yet to finish (the PKCE verifier stays here).
mcp_credentials = Table(
    "tarry_mcp_credentials",
    metadata,
    Column("server", String(500), primary_key=True),
    Column("identity", String(200), primary_key=True),
    Column("tokens", Json),
    Column("tokens_expire_at", UTCDateTime),
    Column("client_info", Json),
    Column("version", Integer, nullable=False, default=0, server_default="0"),
    Column("refreshing_by", String(120)),
    Column("refreshing_until", UTCDateTime),
    Column("updated_at", UTCDateTime, nullable=False),
)

mcp_logins = Table(
    "tarry_mcp_logins",
    metadata,
    Column("state", String(200), primary_key=True),
    Column("server", String(500), nullable=False),
    Column("identity", String(200), nullable=False),
    Column("code_verifier", Text, nullable=False),
    Column("code", Text),
    Column("issuer", Text),
    # 0011: the issuer the login was sent to (the redirect's iss must match it), and why a redirect was refused.
    Column("expected_issuer", Text),
    Column("issuer_required", Boolean, nullable=False, server_default=false()),
    Column("refused", Text),
    Column("created_at", UTCDateTime, nullable=False),
    Column("expires_at", UTCDateTime, nullable=False),
    Column("received_at", UTCDateTime),
    Column("used_at", UTCDateTime),
    Index("ix_tarry_mcp_logins_server", "server", "identity"),
)

decision_events = Table(
    # The audit trail (0007): one row per attempt to decide, written in the decision's own transaction.
    # Append-only: tarry never updates or deletes these rows (a test reads the code to check; on PostgreSQL
    # migration 0012's trigger refuses it). They stay when a chat is pruned (no foreign key), so the trail
    # outlives what it describes.
    "tarry_decision_events",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("at", UTCDateTime, nullable=False),
    Column("chat_id", String(36), nullable=False),
    Column("question_id", String(36), nullable=False),
    Column("call_id", String(200)),
    Column("tool", String(200)),
    Column("arguments", Json),
    Column("kind", String(16), nullable=False),
    Column("message", Text, nullable=False),
    Column("decision", String(16), nullable=False),
    Column("outcome", String(16), nullable=False),
    Column("answer", Json),
    Column("note", Text),
    Column("by_id", String(200)),
    Column("by_name", String(200)),
    Column("channel", String(16), nullable=False),
    Column("detail", Text),
    # The chains (0012): the row's lane (one of several chains, by its chat), its place in the lane and the
    # SHA-256 of its content and of the lane's row before it (tarry.store.chain). A row written by anything
    # but tarry has none of them.
    Column("lane", Integer),
    Column("seq", Id),
    Column("hash", String(64)),
    Index("ix_tarry_decision_events_chat", "chat_id", "id"),
    Index("ix_tarry_decision_events_question", "question_id"),
    Index("ix_tarry_decision_events_lane", "lane", "seq", unique=True),
)

# The MCP server's rows (tarry.mcp_server): its tasks (0006) and the events of its resumable streams (0009).
# They are part of the store's schema, so its migrations and its schema check cover them; the server reads
# and writes them.
served_tasks = Table(
    "tarry_served_tasks",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("chat_id", String(36), ForeignKey("tarry_chats.id", ondelete="CASCADE"), nullable=False),
    Column("tool", String(200), nullable=False),
    Column("status", String(16), nullable=False),
    Column("status_message", Text),
    Column("ttl_ms", BigInteger),
    Column("poll_interval_ms", Integer),
    Column("created_at", UTCDateTime, nullable=False),
    Column("last_updated_at", UTCDateTime, nullable=False),
    Column("expires_at", UTCDateTime),
    Column("owner", String(200)),
    Column("result", Json),
    Index("ix_tarry_served_tasks_expires", "expires_at"),
    Index("ix_tarry_served_tasks_owner", "owner", "created_at"),
    Index("ix_tarry_served_tasks_chat", "chat_id"),
)

MAX_STREAM = 200
"""The most characters a stream's name holds (the MCP server names a stream by the JSON-RPC id of its request)."""

stream_events = Table(
    "tarry_stream_events",
    metadata,
    Column("seq", Id, primary_key=True, autoincrement=True),
    Column("id", String(64), nullable=False, unique=True),
    Column("scope", String(64), nullable=False),
    Column("stream", String(MAX_STREAM), nullable=False),
    Column("message", Json),
    Column("expires_at", UTCDateTime, nullable=False),
    Index("ix_tarry_stream_events_stream", "scope", "stream", "seq"),
    Index("ix_tarry_stream_events_expires", "expires_at"),
)

grants = Table(
    # Standing grants (0013): "always allow" a tool's calls, within constraints and a scope, until an expiry or
    # a revocation. Rows are never deleted: a revoked or expired grant stays for the record, as the trail does.
    "tarry_grants",
    metadata,
    Column("id", String(36), primary_key=True),
    Column("tool", String(200), nullable=False),
    Column("constraints", Json),
    Column("chat_id", String(36)),
    Column("agent", String(200)),
    Column("granted_by", String(200), nullable=False),
    Column("granted_by_name", String(200)),
    Column("granted_at", UTCDateTime, nullable=False),
    Column("expires_at", UTCDateTime),
    Column("revoked_at", UTCDateTime),
    Column("revoked_by", String(200)),
    Column("revoked_by_name", String(200)),
    Column("question_id", String(36)),
    Index("ix_tarry_grants_tool", "tool"),
)

# Slack (0015): each message the Slack sender posted about a question, by the delivery that posted it.
slack_messages = Table(
    "tarry_slack_messages",
    metadata,
    Column("delivery_id", String(200), primary_key=True),
    Column("question_id", String(36), ForeignKey("tarry_questions.id", ondelete="CASCADE"), nullable=False),
    Column("channel", String(200), nullable=False),
    Column("ts", String(64), nullable=False),
    Column("posted_at", UTCDateTime, nullable=False),
    Index("ix_tarry_slack_messages_question", "question_id"),
)

# Notifications (0017): the outbox. A notice of each event on a question (asked, decided, cancelled, reminded,
# escalated) is written by a
# trigger on tarry_questions, so in the transaction (or the one statement) of the change itself, whichever path
# wrote it; a notice of an expiry by the notifier's sweep. A notifier expands each notice into deliveries, one per
# channel and recipient, and sends each until it succeeds or its attempts run out (tarry.store.outbox).
notices = Table(
    "tarry_notices",
    metadata,
    Column("id", String(80), primary_key=True),
    Column("event", String(16), nullable=False),
    Column("question_id", String(36), ForeignKey("tarry_questions.id", ondelete="CASCADE"), nullable=False),
    Column("chat_id", String(36), nullable=False),
    Column("noticed_at", UTCDateTime, nullable=False),
    Column("expanded_at", UTCDateTime),
    Index("ix_tarry_notices_question", "question_id"),
    Index(
        "ix_tarry_notices_pending",
        "noticed_at",
        sqlite_where=Column("expanded_at").is_(None),
        postgresql_where=Column("expanded_at").is_(None),
    ),
)

deliveries = Table(
    "tarry_deliveries",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("notice_id", String(80), ForeignKey("tarry_notices.id", ondelete="CASCADE"), nullable=False),
    Column("channel", String(40), nullable=False),
    Column("recipient_id", String(200)),
    Column("recipient_name", String(200)),
    Column("address", Text),
    Column("state", String(16), nullable=False),
    Column("attempts", Integer, nullable=False, default=0, server_default="0"),
    Column("next_attempt_at", UTCDateTime, nullable=False),
    Column("claimed_by", String(120)),
    Column("claimed_until", UTCDateTime),
    Column("last_error", Text),
    Column("sent_at", UTCDateTime),
    Column("created_at", UTCDateTime, nullable=False),
    Index("ix_tarry_deliveries_notice", "notice_id"),
    Index(
        "ix_tarry_deliveries_due",
        "next_attempt_at",
        sqlite_where=Column("state") == literal_column("'pending'"),
        postgresql_where=Column("state") == literal_column("'pending'"),
    ),
)
