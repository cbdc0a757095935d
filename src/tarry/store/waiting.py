"""What the store knows about paused tasks beyond the task itself: which chat, since when."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, select

from tarry.errors import CorruptStateError
from tarry.store.rows import Row, call_from_row, load_task, read_each, waiting_on
from tarry.store.tables import UNDECIDED_BY_KEY, chats, questions, tool_calls
from tarry.tasks import Task


@dataclass(frozen=True)
class WaitingTask:
    """A paused task with the facts a screen shows about it.

    ``since`` is when its call was recorded (the task has been working since about then);
    ``version`` counts the saved changes of the call's pause state; ``next_check`` is when a
    background worker next looks at the chat (``None``: no worker has it scheduled). The
    task's own ``poll_interval`` says how often it wants to be checked.
    """

    task: Task
    chat_id: str
    since: datetime
    version: int
    next_check: datetime | None = None


def waiting_tasks(connection: Connection, chat_id: str | None, skipped: list[CorruptStateError]) -> list[WaitingTask]:
    """Paused tasks of open calls that wait on no undecided question, oldest call first.

    A call whose row cannot be read is left out, its error added to ``skipped``.
    """
    query = (
        select(tool_calls, chats.c.next_check_at)
        .join(chats, chats.c.id == tool_calls.c.chat_id)
        .where(tool_calls.c.result_message_id.is_(None), tool_calls.c.state.is_not(None))
        .order_by(tool_calls.c.created_at, tool_calls.c.id)
    )
    if chat_id is not None:
        query = query.where(tool_calls.c.chat_id == chat_id)
    paused = read_each(connection.execute(query).mappings(), _read_paused, skipped)
    waiting = {question_id for _, _, on in paused for question_id in on}
    undecided: set[str] = set()
    if waiting:
        undecided = set(
            connection.execute(select(questions.c.id).where(questions.c.id.in_(waiting), UNDECIDED_BY_KEY)).scalars()
        )
    return [
        WaitingTask(task, row["chat_id"], row["created_at"], row["version"], row["next_check_at"])
        for row, task, on in paused
        if not undecided.intersection(on)
    ]


def _read_paused(row: Row) -> tuple[Row, Task, set[str]]:
    task = load_task(row, call_from_row(row))
    assert task is not None
    return row, task, waiting_on(row)
