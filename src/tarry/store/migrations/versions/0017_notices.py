"""Notifications: the outbox of notices of what happened to questions, and their deliveries.

A trigger on ``tarry_questions`` writes the notice of a question asked (its row inserted), of a question
decided or cancelled (its ``decision`` set), and of one reminded or escalated by its policy (``reminded_at``,
``escalated_at`` set, migration 0016), in the statement that makes the change: every path that writes a
question (the locked decision, PostgreSQL's one-statement decisions, a reply's questions, a turn approved whole)
writes its notice in its own transaction, and a rolled-back change leaves none. A notice's id is the question's id
and the event (``<question>.asked``), so a notice is never written twice.

Revision ID: 0017
Revises: 0016
"""

import sqlalchemy as sa
from alembic import op

from tarry.store.tables import UTCDateTime

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

_QUESTIONS = "tarry_questions"
_NOTICE = (
    "INSERT INTO tarry_notices (id, event, question_id, chat_id, noticed_at) "
    "VALUES (NEW.id || '.{event}', '{event}', NEW.id, NEW.chat_id, {at})"
)
_DECIDED_EVENT = "CASE NEW.decision WHEN 'cancel' THEN 'cancelled' ELSE 'decided' END"
_SQLITE_UP = [
    f"""CREATE TRIGGER tarry_notice_asked AFTER INSERT ON {_QUESTIONS}
BEGIN
    {_NOTICE.format(event="asked", at="NEW.asked_at").replace("INSERT", "INSERT OR IGNORE", 1)};
END""",
    f"""CREATE TRIGGER tarry_notice_decided AFTER UPDATE OF decision ON {_QUESTIONS}
WHEN OLD.decision IS NULL AND NEW.decision IS NOT NULL
BEGIN
    INSERT OR IGNORE INTO tarry_notices (id, event, question_id, chat_id, noticed_at)
    VALUES (NEW.id || '.' || {_DECIDED_EVENT}, {_DECIDED_EVENT}, NEW.id, NEW.chat_id, NEW.decided_at);
END""",
]
_FOLLOW_UPS = (("reminded", "reminded_at"), ("escalated", "escalated_at"))
"""The follow-ups of an approval's policy that are notices too: the event, and the column that records it."""
_SQLITE_UP += [
    f"""CREATE TRIGGER tarry_notice_{event} AFTER UPDATE OF {column} ON {_QUESTIONS}
WHEN OLD.{column} IS NULL AND NEW.{column} IS NOT NULL
BEGIN
    {_NOTICE.format(event=event, at=f"NEW.{column}").replace("INSERT", "INSERT OR IGNORE", 1)};
END"""
    for event, column in _FOLLOW_UPS
]
_SQLITE_DOWN = [
    *(f"DROP TRIGGER tarry_notice_{event}" for event, _ in _FOLLOW_UPS),
    "DROP TRIGGER tarry_notice_decided",
    "DROP TRIGGER tarry_notice_asked",
]
_POSTGRES_UP = [
    f"""CREATE FUNCTION tarry_notice() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    happened text := 'asked';
    at timestamptz := NEW.asked_at;
BEGIN
    IF TG_OP = 'UPDATE' AND TG_ARGV[0] = 'reminded' THEN
        happened := 'reminded';
        at := NEW.reminded_at;
    ELSIF TG_OP = 'UPDATE' AND TG_ARGV[0] = 'escalated' THEN
        happened := 'escalated';
        at := NEW.escalated_at;
    ELSIF TG_OP = 'UPDATE' THEN
        happened := {_DECIDED_EVENT};
        at := NEW.decided_at;
    END IF;
    INSERT INTO tarry_notices (id, event, question_id, chat_id, noticed_at)
        VALUES (NEW.id || '.' || happened, happened, NEW.id, NEW.chat_id, at) ON CONFLICT DO NOTHING;
    RETURN NULL;
END $$""",
    f"CREATE TRIGGER tarry_notice_asked AFTER INSERT ON {_QUESTIONS} FOR EACH ROW EXECUTE FUNCTION tarry_notice()",
    f"CREATE TRIGGER tarry_notice_decided AFTER UPDATE OF decision ON {_QUESTIONS} FOR EACH ROW "
    "WHEN (OLD.decision IS NULL AND NEW.decision IS NOT NULL) EXECUTE FUNCTION tarry_notice('decided')",
    *(
        f"CREATE TRIGGER tarry_notice_{event} AFTER UPDATE OF {column} ON {_QUESTIONS} FOR EACH ROW "
        f"WHEN (OLD.{column} IS NULL AND NEW.{column} IS NOT NULL) EXECUTE FUNCTION tarry_notice('{event}')"
        for event, column in _FOLLOW_UPS
    ),
]
_POSTGRES_DOWN = [
    *(f"DROP TRIGGER tarry_notice_{event} ON {_QUESTIONS}" for event, _ in _FOLLOW_UPS),
    f"DROP TRIGGER tarry_notice_decided ON {_QUESTIONS}",
    f"DROP TRIGGER tarry_notice_asked ON {_QUESTIONS}",
    "DROP FUNCTION tarry_notice()",
]


def upgrade() -> None:
    op.create_table(
        "tarry_notices",
        sa.Column("id", sa.String(80), primary_key=True),
        sa.Column("event", sa.String(16), nullable=False),
        sa.Column(
            "question_id", sa.String(36), sa.ForeignKey("tarry_questions.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("chat_id", sa.String(36), nullable=False),
        sa.Column("noticed_at", UTCDateTime, nullable=False),
        sa.Column("expanded_at", UTCDateTime),
    )
    op.create_index("ix_tarry_notices_question", "tarry_notices", ["question_id"])
    pending = sa.column("expanded_at").is_(None)
    op.create_index(
        "ix_tarry_notices_pending", "tarry_notices", ["noticed_at"], sqlite_where=pending, postgresql_where=pending
    )
    op.create_table(
        "tarry_deliveries",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("notice_id", sa.String(80), sa.ForeignKey("tarry_notices.id", ondelete="CASCADE"), nullable=False),
        sa.Column("channel", sa.String(40), nullable=False),
        sa.Column("recipient_id", sa.String(200)),
        sa.Column("recipient_name", sa.String(200)),
        sa.Column("address", sa.Text),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("next_attempt_at", UTCDateTime, nullable=False),
        sa.Column("claimed_by", sa.String(120)),
        sa.Column("claimed_until", UTCDateTime),
        sa.Column("last_error", sa.Text),
        sa.Column("sent_at", UTCDateTime),
        sa.Column("created_at", UTCDateTime, nullable=False),
    )
    op.create_index("ix_tarry_deliveries_notice", "tarry_deliveries", ["notice_id"])
    due = sa.column("state") == sa.literal_column("'pending'")
    op.create_index(
        "ix_tarry_deliveries_due", "tarry_deliveries", ["next_attempt_at"], sqlite_where=due, postgresql_where=due
    )
    for statement in _POSTGRES_UP if op.get_bind().dialect.name == "postgresql" else _SQLITE_UP:
        op.execute(statement)


def downgrade() -> None:
    for statement in _POSTGRES_DOWN if op.get_bind().dialect.name == "postgresql" else _SQLITE_DOWN:
        op.execute(statement)
    op.drop_table("tarry_deliveries")
    op.drop_table("tarry_notices")
