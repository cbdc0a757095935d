"""Accountable decisions: who decided through what, approval policies and counted approvals, the audit trail.

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

from tarry.store.tables import UTCDateTime

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None
_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    for column in (
        sa.Column("policy", sa.JSON),
        sa.Column("votes", sa.JSON),
        sa.Column("decided_by", sa.String(200)),
        sa.Column("decided_by_name", sa.String(200)),
        sa.Column("channel", sa.String(16)),
    ):
        op.add_column("tarry_questions", column)
    op.create_table(
        "tarry_decision_events",
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column("at", UTCDateTime, nullable=False),
        sa.Column("chat_id", sa.String(36), nullable=False),
        sa.Column("question_id", sa.String(36), nullable=False),
        sa.Column("call_id", sa.String(200)),
        sa.Column("tool", sa.String(200)),
        sa.Column("arguments", sa.JSON),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("message", sa.Text, nullable=False),
        sa.Column("decision", sa.String(16), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("answer", sa.JSON),
        sa.Column("note", sa.Text),
        sa.Column("by_id", sa.String(200)),
        sa.Column("by_name", sa.String(200)),
        sa.Column("channel", sa.String(16), nullable=False),
        sa.Column("detail", sa.Text),
    )
    op.create_index("ix_tarry_decision_events_chat", "tarry_decision_events", ["chat_id", "id"])
    op.create_index("ix_tarry_decision_events_question", "tarry_decision_events", ["question_id"])


def downgrade() -> None:
    op.drop_table("tarry_decision_events")
    with op.batch_alter_table("tarry_questions") as batch:
        for name in ("channel", "decided_by_name", "decided_by", "votes", "policy"):
            batch.drop_column(name)
