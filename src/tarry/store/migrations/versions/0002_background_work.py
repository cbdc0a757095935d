"""Background work: when a worker next looks at a chat, and cancellation requests.

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

from tarry.store.tables import UTCDateTime

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("tarry_chats", sa.Column("next_check_at", UTCDateTime))
    op.add_column("tarry_chats", sa.Column("schedule_version", sa.Integer, nullable=False, server_default="0"))
    op.add_column("tarry_chats", sa.Column("cancel_requested_at", UTCDateTime))
    op.create_index("ix_tarry_chats_next_check", "tarry_chats", ["next_check_at"])


def downgrade() -> None:
    op.drop_index("ix_tarry_chats_next_check", table_name="tarry_chats")
    with op.batch_alter_table("tarry_chats") as batch:
        batch.drop_column("cancel_requested_at")
        batch.drop_column("schedule_version")
        batch.drop_column("next_check_at")
