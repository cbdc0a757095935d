"""Each approval's proposal digest: what a decision that says which arguments it saw (``seen``) is checked against.

``digest`` holds [`Question.proposal_digest`][tarry.Question.proposal_digest] for a call's approval (NULL for
any other question), so the statements that decide without reading the question (``tarry.store.decision_sql``) can
refuse a decision made on a view of arguments changed since. The undecided approvals already asked get theirs here;
a decided question's digest is never read (the rule ``decided`` stops a decision first).

Revision ID: 0018
Revises: 0017
"""

from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa
from alembic import op

from tarry.questions import digest_of

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

_BATCH = 500


def upgrade() -> None:
    op.add_column("tarry_questions", sa.Column("digest", sa.String(64)))
    questions = sa.table(
        "tarry_questions",
        sa.column("id", sa.String),
        sa.column("tool_call_id", sa.Integer),
        sa.column("kind", sa.String),
        sa.column("decision", sa.String),
        sa.column("extra", sa.JSON),
        sa.column("votes", sa.JSON),
        sa.column("digest", sa.String),
    )
    calls = sa.table("tarry_tool_calls", sa.column("id", sa.Integer), sa.column("arguments", sa.JSON))
    connection = op.get_bind()
    undecided = (
        sa.select(questions.c.id, questions.c.extra, questions.c.votes, calls.c.arguments)
        .join(calls, calls.c.id == questions.c.tool_call_id)
        .where(questions.c.kind == "approval", questions.c.decision.is_(None))
        .order_by(questions.c.id)
    )
    rows = connection.execute(undecided).all()
    digests = [{"row_id": row.id, "new_digest": _digest(row.extra, row.votes, row.arguments)} for row in rows]
    set_digest = (
        sa.update(questions).where(questions.c.id == sa.bindparam("row_id")).values(digest=sa.bindparam("new_digest"))
    )
    for start in range(0, len(digests), _BATCH):
        connection.execute(set_digest, digests[start : start + _BATCH])


def _digest(extra: Any, votes: Any, arguments: Any) -> str:
    """As ``Question.proposal`` reads it of an undecided approval: the last vote's changed arguments, else (no vote
    yet) the arguments it was asked again for, else the model's."""
    if isinstance(votes, list) and votes:
        last = votes[-1]
        if isinstance(last, Mapping) and isinstance(last.get("arguments"), Mapping):
            return digest_of(last["arguments"])
    elif isinstance(extra, Mapping) and isinstance(extra.get("changed_arguments"), Mapping):
        return digest_of(extra["changed_arguments"])
    return digest_of(arguments if isinstance(arguments, Mapping) else {})


def downgrade() -> None:
    op.drop_column("tarry_questions", "digest")
