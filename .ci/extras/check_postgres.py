"""`tarry[postgres]` alone: a chat parked, listed, approved and carried on against the real PostgreSQL.

The chat is started and carried on in this process (psycopg's asyncio connections, run in
SQLAlchemy's greenlets); the list and the approval come from ``tarry`` commands, real processes.
Everything lives in a schema of its own, dropped at the end.
"""

from __future__ import annotations

import asyncio
import uuid
from urllib.parse import quote

import psycopg
from common import FINAL, from_the_wheel, passed, pending_ids, refunds, service_url, tarry_command

from tarry.jobs import continue_chat
from tarry.store import Store

SERVER = service_url("TARRY_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


async def main(url: str) -> None:
    async with Store(url) as store:
        await store.setup()
        chat = await store.start_chat("Order A17 arrived broken.", agent=refunds)
        assert chat.waiting, chat.messages
    (question,) = pending_ids(url)
    tarry_command("approve", question, "--url", url)
    async with Store(url) as store:
        assert await continue_chat(store, chat.id, [refunds]) is None
        carried = await store.load_chat(chat.id)
        assert carried.messages[-1].content == FINAL, carried.messages
        assert await store.pending_questions() == []


if __name__ == "__main__":
    from_the_wheel()
    schema = f"extras_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(SERVER, autocommit=True) as connection:
        connection.execute(f'CREATE SCHEMA "{schema}"')
    try:
        separator = "&" if "?" in SERVER else "?"
        asyncio.run(main(f"{SERVER}{separator}options={quote(f'-csearch_path={schema}')}"))
    finally:
        with psycopg.connect(SERVER, autocommit=True) as connection:
            connection.execute(f'DROP SCHEMA "{schema}" CASCADE')
    passed("postgres", "a chat parked, listed by `tarry pending`, approved by `tarry approve`, carried on")
