"""OAuth for MCP servers: shared tokens and client registrations, and logins waiting for their code.

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

from tarry.store.tables import UTCDateTime

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tarry_mcp_credentials",
        sa.Column("server", sa.String(500), primary_key=True),
        sa.Column("identity", sa.String(200), primary_key=True),
        sa.Column("tokens", sa.JSON),
        sa.Column("tokens_expire_at", UTCDateTime),
        sa.Column("client_info", sa.JSON),
        sa.Column("version", sa.Integer, nullable=False, server_default="0"),
        sa.Column("refreshing_by", sa.String(120)),
        sa.Column("refreshing_until", UTCDateTime),
        sa.Column("updated_at", UTCDateTime, nullable=False),
    )
    op.create_table(
        "tarry_mcp_logins",
        sa.Column("state", sa.String(200), primary_key=True),
        sa.Column("server", sa.String(500), nullable=False),
        sa.Column("identity", sa.String(200), nullable=False),
        sa.Column("code_verifier", sa.Text, nullable=False),
        sa.Column("code", sa.Text),
        sa.Column("issuer", sa.Text),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("expires_at", UTCDateTime, nullable=False),
        sa.Column("received_at", UTCDateTime),
        sa.Column("used_at", UTCDateTime),
    )
    op.create_index("ix_tarry_mcp_logins_server", "tarry_mcp_logins", ["server", "identity"])


def downgrade() -> None:
    op.drop_index("ix_tarry_mcp_logins_server", "tarry_mcp_logins")
    op.drop_table("tarry_mcp_logins")
    op.drop_table("tarry_mcp_credentials")
