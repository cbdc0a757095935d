"""Provider state: a nullable JSON column for what an adapter needs back with a message.

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("tarry_messages", sa.Column("provider_data", sa.JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tarry_messages") as batch:
        batch.drop_column("provider_data")
