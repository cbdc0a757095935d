"""Indexes that let a chat's rows be deleted without reading whole tables (``Store.prune``).

Deleting a chat makes the database look up the rows that refer to it: its questions and its MCP
server tasks by ``chat_id`` (``ON DELETE CASCADE``), and the calls whose result is one of its messages
(``result_message_id``). Without an index each of those lookups reads the whole table, once per row
deleted.

Revision ID: 0014
Revises: 0013
"""

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_tarry_questions_chat", "tarry_questions", ["chat_id"])
    op.create_index("ix_tarry_served_tasks_chat", "tarry_served_tasks", ["chat_id"])
    op.create_index("ix_tarry_tool_calls_result", "tarry_tool_calls", ["result_message_id"])


def downgrade() -> None:
    op.drop_index("ix_tarry_tool_calls_result", "tarry_tool_calls")
    op.drop_index("ix_tarry_served_tasks_chat", "tarry_served_tasks")
    op.drop_index("ix_tarry_questions_chat", "tarry_questions")
