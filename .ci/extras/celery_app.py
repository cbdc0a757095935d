"""The Celery app of celery.py's workers: ``celery -A celery_app worker``, told its broker, queue and database."""

from __future__ import annotations

import os

from celery import Celery
from common import refunds

from tarry.jobs.celery import register

app = Celery("tarry-extras", broker=os.environ["EXTRAS_BROKER"])
app.conf.update(
    task_default_queue=os.environ["EXTRAS_QUEUE"],
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)
register(app, [refunds], url=os.environ["EXTRAS_DATABASE"])
