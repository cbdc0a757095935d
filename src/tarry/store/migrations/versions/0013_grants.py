"""Standing grants: "always allow" a tool's calls within constraints, a scope and an expiry.

Revision ID: 0013
Revises: 0012
"""

import sqlalchemy as sa
from alembic import op

from tarry.store.tables import UTCDateTime

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tarry_grants",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("tool", sa.String(200), nullable=False),
        sa.Column("constraints", sa.JSON),
        sa.Column("chat_id", sa.String(36)),
        sa.Column("agent", sa.String(200)),
        sa.Column("granted_by", sa.String(200), nullable=False),
        sa.Column("granted_by_name", sa.String(200)),
        sa.Column("granted_at", UTCDateTime, nullable=False),
        sa.Column("expires_at", UTCDateTime),
        sa.Column("revoked_at", UTCDateTime),
        sa.Column("revoked_by", sa.String(200)),
        sa.Column("revoked_by_name", sa.String(200)),
        sa.Column("question_id", sa.String(36)),
    )
    op.create_index("ix_tarry_grants_tool", "tarry_grants", ["tool"])


def downgrade() -> None:
    op.drop_table("tarry_grants")
