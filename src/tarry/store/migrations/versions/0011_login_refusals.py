"""Logins to MCP servers know the issuer they were sent to, and keep why a redirect was refused.

Revision ID: 0011
Revises: 0010
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tarry_mcp_logins") as batch:
        batch.add_column(sa.Column("expected_issuer", sa.Text))
        batch.add_column(sa.Column("issuer_required", sa.Boolean, nullable=False, server_default=sa.false()))
        batch.add_column(sa.Column("refused", sa.Text))


def downgrade() -> None:
    with op.batch_alter_table("tarry_mcp_logins") as batch:
        batch.drop_column("refused")
        batch.drop_column("issuer_required")
        batch.drop_column("expected_issuer")
