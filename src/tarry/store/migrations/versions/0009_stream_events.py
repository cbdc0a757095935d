"""Stream events: SSE events an MCP server keeps so a client can resume a dropped stream.

Revision ID: 0009
Revises: 0008
"""

import sqlalchemy as sa
from alembic import op

from tarry.store.tables import Id, UTCDateTime

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tarry_stream_events",
        sa.Column("seq", Id, primary_key=True, autoincrement=True),
        sa.Column("id", sa.String(64), nullable=False, unique=True),
        sa.Column("scope", sa.String(64), nullable=False),
        sa.Column("stream", sa.String(200), nullable=False),
        sa.Column("message", sa.JSON),
        sa.Column("expires_at", UTCDateTime, nullable=False),
    )
    op.create_index("ix_tarry_stream_events_stream", "tarry_stream_events", ["scope", "stream", "seq"])
    op.create_index("ix_tarry_stream_events_expires", "tarry_stream_events", ["expires_at"])


def downgrade() -> None:
    op.drop_table("tarry_stream_events")
