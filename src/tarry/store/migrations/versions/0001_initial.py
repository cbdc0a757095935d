"""The first schema: chats, messages, tool calls and questions.

Revision ID: 0001
Revises:
"""

from alembic import op

from tarry.store.tables import metadata

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None
TABLES = ("tarry_chats", "tarry_messages", "tarry_tool_calls", "tarry_questions")


def upgrade() -> None:
    bind = op.get_bind()
    metadata.create_all(bind, tables=[metadata.tables[name] for name in TABLES])


def downgrade() -> None:
    bind = op.get_bind()
    metadata.drop_all(bind, tables=[metadata.tables[name] for name in reversed(TABLES)])
