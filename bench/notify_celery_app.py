"""The Celery app of bench/notify_bench.py: ``celery -A notify_celery_app worker -B`` (from bench/), with
BENCH_BROKER, BENCH_DB, BENCH_QUEUE, BENCH_WEBHOOK and BENCH_WATCH ("1": each worker watches the outbox; "0": beat
alone, every second) set."""

from __future__ import annotations

import os

from celery import Celery
from notify_bench import SECRET

from tarry.jobs.celery import register_notifier
from tarry.jobs.webhook import WebhookSender

app = Celery("tarry-notify-bench", broker=os.environ["BENCH_BROKER"])
app.conf.update(
    task_default_queue=os.environ["BENCH_QUEUE"],
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)
register_notifier(
    app,
    lambda: [WebhookSender(os.environ["BENCH_WEBHOOK"], SECRET)],
    url=os.environ["BENCH_DB"],
    watch=0.025 if os.environ["BENCH_WATCH"] == "1" else None,
)
