"""A notice of each approval counted while more are needed: ``counted``.

A policy that needs several people's approval (``Approval(count=2)``) records each approval but the last as a vote
(``tarry_questions.votes``), not a decision, so migration 0017's triggers wrote no notice of it and nobody was told
(a Slack message kept saying "0 of 2"). This trigger writes a ``counted`` notice when ``votes`` is set on an
undecided question, in the statement that counts the vote; its id holds the number of votes
(``<question>.counted.1``), so each vote has one notice, and the vote that decides writes the ``decided`` one.

Revision ID: 0020
Revises: 0019
"""

from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

_QUESTIONS = "tarry_questions"
# Only a list of votes is counted: a row whose votes were tampered with into something else is left to the
# checks that refuse to read it (a trigger that raised would stop the statement that finds it).
_SQLITE_UP = f"""CREATE TRIGGER tarry_notice_counted AFTER UPDATE OF votes ON {_QUESTIONS}
WHEN NEW.decision IS NULL AND CASE WHEN json_valid(NEW.votes) THEN json_type(NEW.votes) = 'array' ELSE 0 END
BEGIN
    INSERT OR IGNORE INTO tarry_notices (id, event, question_id, chat_id, noticed_at)
    VALUES (NEW.id || '.counted.' || json_array_length(NEW.votes), 'counted', NEW.id, NEW.chat_id,
            strftime('%Y-%m-%d %H:%M:%f', 'now'));
END"""
_POSTGRES_UP = [
    """CREATE FUNCTION tarry_notice_counted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO tarry_notices (id, event, question_id, chat_id, noticed_at)
        VALUES (NEW.id || '.counted.' || json_array_length(NEW.votes), 'counted', NEW.id, NEW.chat_id,
                clock_timestamp())
        ON CONFLICT DO NOTHING;
    RETURN NULL;
END $$""",
    f"CREATE TRIGGER tarry_notice_counted AFTER UPDATE OF votes ON {_QUESTIONS} FOR EACH ROW "
    "WHEN (NEW.decision IS NULL AND json_typeof(NEW.votes) = 'array') "
    "EXECUTE FUNCTION tarry_notice_counted()",
]
_POSTGRES_DOWN = [f"DROP TRIGGER tarry_notice_counted ON {_QUESTIONS}", "DROP FUNCTION tarry_notice_counted()"]
_SQLITE_DOWN = ["DROP TRIGGER tarry_notice_counted"]


def upgrade() -> None:
    for statement in _POSTGRES_UP if op.get_bind().dialect.name == "postgresql" else [_SQLITE_UP]:
        op.execute(statement)


def downgrade() -> None:
    for statement in _POSTGRES_DOWN if op.get_bind().dialect.name == "postgresql" else _SQLITE_DOWN:
        op.execute(statement)
