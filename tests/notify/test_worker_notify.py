"""The embedded worker delivers notices alongside its chats when given a notifier, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio

from tarry.jobs import Worker
from tarry.jobs.notifier import Notifier
from tarry.jobs.webhook import WebhookSender
from tarry.store import Store
from tests.jobs.tools import clerk
from tests.notify.conftest import SECRET, Receiver
from tests.store.test_approve_all import transfer, turn_of


async def test_a_worker_with_a_notifier_sends_the_webhooks_of_a_question_asked_then_approved(
    store: Store, receiver: Receiver
) -> None:
    sender = WebhookSender(receiver.url, SECRET)
    worker = Worker(store, [clerk()], notifier=Notifier(store, [sender]))
    running = asyncio.create_task(worker.run())
    try:
        _, (question,) = await turn_of(store, [transfer("Bob")])
        await asyncio.to_thread(receiver.wait_for, 1)
        assert await store.approve(question.id)
        got = await asyncio.to_thread(receiver.wait_for, 2)
    finally:
        worker.stop()
        await running
        await sender.aclose()

    assert [(line["type"], line["question"], line["verified"]) for line in got] == [
        ("question.asked", question.id, True),
        ("question.decided", question.id, True),
    ]
