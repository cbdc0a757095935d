"""Migrations that change tables with rows in them keep every row (real SQLite files and PostgreSQL)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from sqlalchemy import delete, func, insert, inspect, select
from sqlalchemy.exc import IntegrityError

from tarry.clock import utcnow
from tarry.edits import arguments_digest
from tarry.errors import ProposalChangedError
from tarry.store import Store
from tarry.store.schema import MIGRATIONS
from tarry.store.tables import chats, metadata, questions, tool_calls
from tests.store.test_database_errors import migrate_to, on_database


def _rows_of_0007(connection: Any) -> None:
    """A chat with one call waiting on its approval, as tarry at revision 0007 wrote it."""
    now = utcnow()
    connection.execute(
        insert(chats).values(id="chat-1", settings={}, created_at=now, version=1, message_count=2, schedule_version=0)
    )
    row_id = connection.execute(
        insert(tool_calls)
        .values(
            chat_id="chat-1", message_position=1, call_id="call-1", name="transfer_money",
            arguments={"to": "Bob", "amount": 5}, needs_approval=True, version=0, created_at=now,
        )
        .returning(tool_calls.c.id)
    ).scalar_one()  # fmt: skip
    connection.execute(
        insert(questions).values(
            id="question-1", chat_id="chat-1", tool_call_id=row_id, number=0, kind="approval",
            message="Approve the transfer_money call?", asked_at=now,
        )
    )  # fmt: skip


async def test_0008_lets_a_question_have_no_call_and_keeps_the_rows_of_0007(database_url: str) -> None:
    migrate_to(database_url, "0007")
    on_database(database_url, _rows_of_0007)
    async with Store(database_url) as store:
        await store.setup()  # migrates 0007 -> 0008 and on (SQLite rebuilds tarry_questions)
        [kept] = await store.pending_questions()
        assert (kept.id, kept.kind, kept.chat_id) == ("question-1", "approval", "chat-1")
        assert kept.tool_call is not None and kept.tool_call.name == "transfer_money"
        assert dict(kept.tool_call.arguments) == {"to": "Bob", "amount": 5}
        differences = await store.db.run_read(
            lambda connection: compare_metadata(MigrationContext.configure(connection), metadata)
        )
        assert differences == []  # the rebuilt table has every index and foreign key of a fresh one

        def chat_question(connection: Any) -> None:
            connection.execute(
                insert(questions).values(
                    id="question-2", chat_id="chat-1", tool_call_id=None, number=0, kind="url",
                    message="Log in", url="http://as/authorize", asked_at=utcnow(),
                )
            )  # fmt: skip

        on_database(database_url, chat_question)
        listed = await store.pending_questions()
        assert (listed[0].id, listed[0].tool_call) == ("question-2", None)
        assert [question.id for question in listed] == ["question-2", "question-1"]

        def orphan(connection: Any) -> None:
            connection.execute(
                insert(questions).values(
                    id="question-3", chat_id="chat-1", tool_call_id=999, number=0, kind="approval",
                    message="Approve?", asked_at=utcnow(),
                )
            )  # fmt: skip

        with pytest.raises(IntegrityError):  # the foreign key to the call survived the rebuild
            await store.db.run_write(orphan)
        await store.db.run_write(lambda connection: connection.execute(delete(chats).where(chats.c.id == "chat-1")))
        left = await store.db.run_read(lambda connection: list(connection.scalars(select(questions.c.id))))
        assert left == []  # deleting the chat still takes its questions along


def _approvals_of_0014(connection: Any) -> None:
    """Three undecided approvals of one call as tarry at 0014 wrote them: the model's arguments, a vote for changed
    ones, and one asked again of the call as changed."""
    _rows_of_0007(connection)
    changed = {"to": "Bob", "amount": 50}
    vote = {"id": "bob", "name": None, "at": utcnow().isoformat(), "digest": "x" * 64, "arguments": changed}
    row_id = connection.execute(select(tool_calls.c.id)).scalar_one()
    for number, (question_id, values) in enumerate(
        [
            ("question-2", {"votes": [vote]}),
            ("question-3", {"extra": {"changed_arguments": {"to": "Ann", "amount": 7}}}),
        ],
        start=1,
    ):
        connection.execute(
            insert(questions).values(
                id=question_id, chat_id="chat-1", tool_call_id=row_id, number=number, kind="approval",
                message="Approve?", asked_at=utcnow(), **values,
            )
        )  # fmt: skip


async def test_0018_gives_each_undecided_approval_the_digest_of_what_it_proposes(database_url: str) -> None:
    migrate_to(database_url, "0014")
    on_database(database_url, _approvals_of_0014)
    async with Store(database_url) as store:
        await store.setup()
        stored = await store.db.run_read(
            lambda connection: dict(connection.execute(select(questions.c.id, questions.c.digest)).all())
        )
        assert stored == {
            "question-1": arguments_digest({"to": "Bob", "amount": 5}),
            "question-2": arguments_digest({"to": "Bob", "amount": 50}),
            "question-3": arguments_digest({"to": "Ann", "amount": 7}),
        }
        for question_id, digest in stored.items():
            assert (await store.question(question_id)).proposal_digest == digest
        with pytest.raises(ProposalChangedError):  # the one-statement path on PostgreSQL reads the column
            await store.approve("question-1", seen=stored["question-2"])
        assert await store.approve("question-1", seen=stored["question-1"])


def _downgrade(url: str, revision: str) -> Callable[[Any], None]:
    def downgrade(connection: Any) -> None:
        if url.startswith("sqlite"):
            connection.exec_driver_sql("PRAGMA foreign_keys=ON")  # as tarry's own connections have them
        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS))
        config.attributes["connection"] = connection
        command.downgrade(config, revision)

    return downgrade


async def test_0019_downgraded_keeps_the_calls_and_their_questions(database_url: str) -> None:
    migrate_to(database_url, "0014")
    on_database(database_url, _approvals_of_0014)
    async with Store(database_url) as store:
        await store.setup()
    on_database(database_url, _downgrade(database_url, "0018"))

    def kept(connection: Any) -> tuple[int, int, bool]:
        found = {column["name"] for column in inspect(connection).get_columns("tarry_tool_calls")}
        calls = connection.execute(select(func.count()).select_from(tool_calls)).scalar_one()
        asked = connection.execute(select(func.count()).select_from(questions)).scalar_one()
        return calls, asked, "ran" in found

    results: list[tuple[int, int, bool]] = []
    on_database(database_url, lambda connection: results.append(kept(connection)))
    assert results == [(1, 3, False)]
