"""The Celery app of the bridge tests: ``celery -A tests.bridges.celery_app worker`` carries bridged chats on.

TARRY_TEST_CELERY_BROKER (the broker URL), TARRY_TEST_CELERY_DB (the database URL) and
TARRY_TEST_CELERY_QUEUE (a queue of the test's own) say where.
"""

from __future__ import annotations

import os

from celery import Celery

from tarry.jobs.celery import register
from tests.bridges.runs import make_bridge


def make_app(broker: str, url: str) -> Celery:
    """A Celery app on ``broker`` whose ``tarry.continue_chat`` carries the bridged chats in ``url`` on."""
    app = Celery("tarry-bridge-tests", broker=broker)
    app.conf.update(
        task_default_queue=os.environ.get("TARRY_TEST_CELERY_QUEUE", "tarry-bridge-tests"),
        broker_connection_retry_on_startup=True,
        worker_prefetch_multiplier=1,
        worker_hijack_root_logger=False,
    )
    register(app, [make_bridge().agent], url=url, lease=3.0, sweep_interval=2.0)
    return app


broker = os.environ.get("TARRY_TEST_CELERY_BROKER")
app = make_app(broker, os.environ["TARRY_TEST_CELERY_DB"]) if broker else Celery("tarry-bridge-tests")
