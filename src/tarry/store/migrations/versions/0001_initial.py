"""The first schema: chats, messages, tool calls and questions.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

from tarry.store.tables import UTCDateTime

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None
Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "tarry_chats",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("model", sa.String(200)),
        sa.Column("agent", sa.String(200)),
        sa.Column("instructions", sa.Text),
        sa.Column("tool_choice", sa.String(200)),
        sa.Column("settings", sa.JSON, nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("claimed_by", sa.String(120)),
        sa.Column("claimed_until", UTCDateTime),
    )
    op.create_table(
        "tarry_messages",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("chat_id", sa.String(36), sa.ForeignKey("tarry_chats.id", ondelete="CASCADE"), nullable=False),
        sa.Column("position", sa.Integer, nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("content", sa.Text, nullable=False),
        sa.Column("tool_calls", sa.JSON),
        sa.Column("tool_call_id", sa.String(200)),
        sa.Column("usage", sa.JSON),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.UniqueConstraint("chat_id", "position", name="uq_tarry_messages_chat_position"),
    )
    op.create_table(
        "tarry_tool_calls",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("chat_id", sa.String(36), sa.ForeignKey("tarry_chats.id", ondelete="CASCADE"), nullable=False),
        sa.Column("message_position", sa.Integer, nullable=False),
        sa.Column("call_id", sa.String(200), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("arguments", sa.JSON, nullable=False),
        sa.Column("needs_approval", sa.Boolean, nullable=False),
        sa.Column("state", sa.JSON),
        sa.Column("waiting_on", sa.JSON),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("claimed_by", sa.String(120)),
        sa.Column("claimed_until", UTCDateTime),
        sa.Column("result_message_id", Id, sa.ForeignKey("tarry_messages.id")),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.UniqueConstraint("chat_id", "call_id", name="uq_tarry_tool_calls_chat_call"),
    )
    op.create_index("ix_tarry_tool_calls_chat_position", "tarry_tool_calls", ["chat_id", "message_position"])
    open_calls = sa.text("result_message_id IS NULL")
    op.create_index(
        "ix_tarry_tool_calls_open",
        "tarry_tool_calls",
        ["chat_id"],
        sqlite_where=open_calls,
        postgresql_where=open_calls,
    )
    op.create_table(
        "tarry_questions",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("chat_id", sa.String(36), sa.ForeignKey("tarry_chats.id", ondelete="CASCADE"), nullable=False),
        sa.Column("tool_call_id", Id, sa.ForeignKey("tarry_tool_calls.id", ondelete="CASCADE"), nullable=False),
        sa.Column("number", sa.Integer, nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("message", sa.Text, nullable=False),
        sa.Column("requested_schema", sa.JSON),
        sa.Column("url", sa.Text),
        sa.Column("source", sa.String(200)),
        sa.Column("key", sa.String(200)),
        sa.Column("extra", sa.JSON),
        sa.Column("asked_at", UTCDateTime, nullable=False),
        sa.Column("expires_at", UTCDateTime),
        sa.Column("decision", sa.String(16)),
        sa.Column("answer", sa.JSON),
        sa.Column("note", sa.Text),
        sa.Column("decided_at", UTCDateTime),
    )
    op.create_index("ix_tarry_questions_call", "tarry_questions", ["tool_call_id"])
    undecided = sa.text("decision IS NULL")
    op.create_index(
        "ix_tarry_questions_undecided",
        "tarry_questions",
        ["tool_call_id"],
        sqlite_where=undecided,
        postgresql_where=undecided,
    )


def downgrade() -> None:
    for table in ("tarry_questions", "tarry_tool_calls", "tarry_messages", "tarry_chats"):
        op.drop_table(table)
