"""Indexes in the listing's order: undecided questions by (call, number), a chat's own undecided by (number, id).

Revision ID: 0010
Revises: 0009
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None
_UNDECIDED = sa.text("decision IS NULL")
_OWN_UNDECIDED = sa.text("tool_call_id IS NULL AND decision IS NULL")


def upgrade() -> None:
    # A page walks the index from its cursor and stops at its size: the number must be in it too.
    op.drop_index("ix_tarry_questions_undecided", "tarry_questions")
    op.create_index(
        "ix_tarry_questions_undecided",
        "tarry_questions",
        ["tool_call_id", "number"],
        sqlite_where=_UNDECIDED,
        postgresql_where=_UNDECIDED,
    )
    op.create_index(
        "ix_tarry_questions_own_undecided",
        "tarry_questions",
        ["number", "id"],
        sqlite_where=_OWN_UNDECIDED,
        postgresql_where=_OWN_UNDECIDED,
    )


def downgrade() -> None:
    op.drop_index("ix_tarry_questions_own_undecided", "tarry_questions")
    op.drop_index("ix_tarry_questions_undecided", "tarry_questions")
    op.create_index(
        "ix_tarry_questions_undecided",
        "tarry_questions",
        ["tool_call_id"],
        sqlite_where=_UNDECIDED,
        postgresql_where=_UNDECIDED,
    )
