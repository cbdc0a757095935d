"""The runs of decided calls' tools that another framework runs in a model turn (a bridge), marked once.

``ran`` is NULL until such a run starts; the process that starts it marks it (``{"started_at": ...}``) in a
transaction of its own, before the tool runs, and records its result (``"finished_at"``, ``"result"``) after it
returns. A later run of the turn (its process died) finds the mark and does not run the tool again. Calls that
exist already were never run so: NULL.

Revision ID: 0019
Revises: 0018
"""

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("tarry_tool_calls", sa.Column("ran", sa.JSON))


def downgrade() -> None:
    # In place (SQLite 3.35 and later drop a plain column): a batch would rebuild the table, and dropping the old
    # one, with tarry's foreign keys on, would delete every question of its calls (ON DELETE CASCADE).
    op.drop_column("tarry_tool_calls", "ran")
