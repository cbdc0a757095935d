"""On SQLite at the default durability every commit waits for the disk, so carrying a chat on commits as few times
as its steps need: the decision (with the claim of the call it frees), the tool's result (with the claim of the
chat's turn), and the model's reply (with the release)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import event

from tarry.store import Store
from tests.store.tools import all_tools, reactive_model

TRANSFER = [{"name": "transfer_money", "arguments": {"to": "Bob", "amount": 5}}]


@contextmanager
def write_commits(store: Store) -> Iterator[list[str]]:
    """The write transactions ``store`` begins in the block (SQLite's ``BEGIN IMMEDIATE``), one entry each."""
    begun: list[str] = []

    def note(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        if statement.startswith("BEGIN IMMEDIATE"):
            begun.append(statement)

    event.listen(store.db.sync_engine, "before_cursor_execute", note)
    try:
        yield begun
    finally:
        event.remove(store.db.sync_engine, "before_cursor_execute", note)


async def parked(store: Store) -> str:
    """A new chat's id, parked on the approval of one transfer."""
    chat = await store.create_chat(reactive_model(TRANSFER), all_tools())
    await chat.ask("Pay Bob 5")
    assert chat.waiting
    return chat.id


async def test_a_chat_that_decides_carries_on_in_three_commits(tmp_path: Path) -> None:
    async with Store(f"sqlite:///{tmp_path / 'chats.db'}") as store:
        await store.setup()
        chat = await store.load_chat(await parked(store), reactive_model(TRANSFER), all_tools())
        (question,) = await chat.pending_questions()
        with write_commits(store) as commits:
            reply = await chat.complete(approve=[question])
        assert reply is not None and reply.content == "All done." and not chat.waiting
        assert len(commits) == 3, commits


async def test_a_chat_decided_elsewhere_carries_on_in_three_commits_after_the_decision(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'chats.db'}"
    async with Store(url) as store, Store(url) as inbox:
        await store.setup()
        chat_id = await parked(store)
        (question,) = await inbox.pending_questions()
        with write_commits(inbox) as decided, write_commits(store) as commits:
            await inbox.approve(question.id, by="ann")
            chat = await store.load_chat(chat_id, reactive_model(TRANSFER), all_tools())
            reply = await chat.complete()
        assert reply is not None and reply.content == "All done." and not chat.waiting
        assert (len(decided), len(commits)) == (1, 3), (decided, commits)
