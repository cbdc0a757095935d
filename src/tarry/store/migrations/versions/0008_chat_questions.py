"""Questions of the chat itself: a question row may have no tool call (an MCP server's first login).

Revision ID: 0008
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None
_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    # SQLite cannot change a column's nullability in place: the batch rebuilds the table, rows and all.
    with op.batch_alter_table("tarry_questions") as batch:
        batch.alter_column("tool_call_id", existing_type=_ID, nullable=True)
    op.create_index(
        "ix_tarry_questions_of_chat",
        "tarry_questions",
        ["chat_id"],
        sqlite_where=sa.text("tool_call_id IS NULL"),
        postgresql_where=sa.text("tool_call_id IS NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_tarry_questions_of_chat", "tarry_questions")
    op.execute("DELETE FROM tarry_questions WHERE tool_call_id IS NULL")
    with op.batch_alter_table("tarry_questions") as batch:
        batch.alter_column("tool_call_id", existing_type=_ID, nullable=False)
