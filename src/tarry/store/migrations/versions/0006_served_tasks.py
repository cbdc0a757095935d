"""Served tasks: the MCP tasks tarry answers for as an MCP server.

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

from tarry.store.tables import UTCDateTime

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tarry_served_tasks",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("chat_id", sa.String(36), sa.ForeignKey("tarry_chats.id", ondelete="CASCADE"), nullable=False),
        sa.Column("tool", sa.String(200), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("status_message", sa.Text),
        sa.Column("ttl_ms", sa.BigInteger),
        sa.Column("poll_interval_ms", sa.Integer),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("last_updated_at", UTCDateTime, nullable=False),
        sa.Column("expires_at", UTCDateTime),
        sa.Column("owner", sa.String(200)),
        sa.Column("result", sa.JSON),
    )
    op.create_index("ix_tarry_served_tasks_expires", "tarry_served_tasks", ["expires_at"])
    op.create_index("ix_tarry_served_tasks_owner", "tarry_served_tasks", ["owner", "created_at"])


def downgrade() -> None:
    op.drop_table("tarry_served_tasks")
