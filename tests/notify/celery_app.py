"""A Celery app whose beat sends ``tarry.deliver_notices``: ``celery -A tests.notify.celery_app worker -B``, with
TARRY_TEST_CELERY_BROKER, TARRY_TEST_CELERY_DB, TARRY_TEST_CELERY_QUEUE and TARRY_TEST_WEBHOOK (the receiver's URL)
set. With TARRY_TEST_CELERY_WATCH_ONLY set, no beat schedule: only the workers' watch of the outbox sends the task."""

from __future__ import annotations

import os

from celery import Celery

from tarry.jobs.celery import register_notifier
from tarry.jobs.webhook import WebhookSender
from tests.notify.conftest import SECRET

app = Celery("tarry-notify-tests", broker=os.environ.get("TARRY_TEST_CELERY_BROKER"))
app.conf.update(
    task_default_queue=os.environ.get("TARRY_TEST_CELERY_QUEUE", "tarry-notify-tests"),
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)
if "TARRY_TEST_CELERY_DB" in os.environ:
    register_notifier(
        app,
        lambda: [WebhookSender(os.environ["TARRY_TEST_WEBHOOK"], SECRET)],
        url=os.environ["TARRY_TEST_CELERY_DB"],
        every=None if "TARRY_TEST_CELERY_WATCH_ONLY" in os.environ else 0.2,
    )
