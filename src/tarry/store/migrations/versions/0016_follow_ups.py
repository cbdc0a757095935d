"""Reminders, escalation and a decline on timeout (an approval policy's follow-ups, ``Store.sweep_reminders``).

A question keeps when its policy's next follow-up is due (``follow_up_at``, NULL when none is left), found by a
partial index of the undecided questions that have one, and when it was reminded and escalated (each happens once).

Revision ID: 0016
Revises: 0015
"""

import sqlalchemy as sa
from alembic import op

from tarry.store.tables import UTCDateTime

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tarry_questions") as batch:
        batch.add_column(sa.Column("follow_up_at", UTCDateTime))
        batch.add_column(sa.Column("reminded_at", UTCDateTime))
        batch.add_column(sa.Column("escalated_at", UTCDateTime))
    # Only the undecided questions a follow-up is due on: small, and no use to a query that does not name the time.
    due = sa.and_(sa.column("decision").is_(None), sa.column("follow_up_at").is_not(None))
    op.create_index(
        "ix_tarry_questions_follow_up",
        "tarry_questions",
        ["follow_up_at"],
        sqlite_where=due,
        postgresql_where=due,
    )


def downgrade() -> None:
    op.drop_index("ix_tarry_questions_follow_up", "tarry_questions")
    with op.batch_alter_table("tarry_questions") as batch:
        batch.drop_column("escalated_at")
        batch.drop_column("reminded_at")
        batch.drop_column("follow_up_at")
