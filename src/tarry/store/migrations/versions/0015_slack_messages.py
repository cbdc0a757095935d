"""Where a question's Slack messages went (the Slack channel and the message's ``ts``), to update them later.

The Slack sender (``tarry.web.slack``) records each message it posts about a question, so a later notice
(decided, expired, cancelled) edits every one of them. Deleting a question deletes its rows.

Revision ID: 0015
Revises: 0014
"""

import sqlalchemy as sa
from alembic import op

from tarry.store.tables import UTCDateTime

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tarry_slack_messages",
        sa.Column("delivery_id", sa.String(200), primary_key=True),
        sa.Column(
            "question_id", sa.String(36), sa.ForeignKey("tarry_questions.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("channel", sa.String(200), nullable=False),
        sa.Column("ts", sa.String(64), nullable=False),
        sa.Column("posted_at", UTCDateTime, nullable=False),
    )
    op.create_index("ix_tarry_slack_messages_question", "tarry_slack_messages", ["question_id"])


def downgrade() -> None:
    op.drop_table("tarry_slack_messages")
