"""`tarry[celery]` alone: a real Celery worker carries an approved chat on, on Redis and on RabbitMQ.

The chat is kept in a SQLite file (chats on PostgreSQL need the postgres extra too). This process
parks it and approves it; the approval enqueues the chat (``enqueue_on_decisions``), and a
``celery -A celery_app worker`` process runs the approved call and the model's last turn.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

from common import DEADLINE, FINAL, from_the_wheel, passed, refunds, service_url, until

from tarry.store import Store

BROKERS = {
    "Redis": service_url("TARRY_TEST_REDIS_URL", "redis://127.0.0.1:6379/0"),
    "RabbitMQ": service_url("TARRY_TEST_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672//"),
}


async def park_and_approve(url: str) -> str:
    from celery_app import app

    from tarry.jobs.celery import enqueue_on_decisions

    async with Store(url) as store:
        await store.setup()
        enqueue_on_decisions(store, app)
        chat = await store.start_chat("Order A17 arrived broken.", agent=refunds)
        (question,) = await store.pending_questions(chat.id)
        assert await store.approve(question.id)
        return chat.id


async def last_message(url: str, chat_id: str) -> str | None:
    async with Store(url) as store:
        return (await store.load_chat(chat_id)).messages[-1].content


def carry_on(broker: str) -> None:
    url = f"sqlite:///{Path(tempfile.mkdtemp()) / 'chats.db'}"
    os.environ.update(EXTRAS_BROKER=broker, EXTRAS_QUEUE=f"extras-{uuid.uuid4().hex[:12]}", EXTRAS_DATABASE=url)
    sys.modules.pop("celery_app", None)  # the app of this broker
    chat_id = asyncio.run(park_and_approve(url))
    celery = str(Path(sys.executable).with_name("celery"))
    worker = subprocess.Popen(
        [celery, "-A", "celery_app", "worker", "--pool", "threads", "--concurrency", "2", "--loglevel", "warning"],
        env={**os.environ, "PYTHONPATH": os.path.dirname(os.path.abspath(__file__))},
    )
    try:
        until(lambda: worker.poll() is not None or asyncio.run(last_message(url, chat_id)) == FINAL, "the worker")
        assert worker.poll() is None, f"the Celery worker ended with status {worker.returncode}"
    finally:
        worker.terminate()
        worker.wait(timeout=DEADLINE)


if __name__ == "__main__":
    from_the_wheel()
    for name, broker in BROKERS.items():
        carry_on(broker)
        print(f"carried on by a Celery worker on {name}")
    passed("celery", "a Celery worker carried an approved chat on, on Redis and on RabbitMQ")
