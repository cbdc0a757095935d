"""Change tracking: a version every change of a chat bumps, and a message counter.

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("tarry_chats", sa.Column("version", sa.Integer, nullable=False, server_default="0"))
    op.add_column("tarry_chats", sa.Column("message_count", sa.Integer, nullable=False, server_default="0"))
    op.execute(
        "UPDATE tarry_chats SET message_count = "
        "(SELECT count(*) FROM tarry_messages WHERE tarry_messages.chat_id = tarry_chats.id)"
    )


def downgrade() -> None:
    with op.batch_alter_table("tarry_chats") as batch:
        batch.drop_column("message_count")
        batch.drop_column("version")
