"""The Celery app of the jobs tests: ``celery -A tests.jobs.celery_app worker`` with the variables below set.

TARRY_TEST_CELERY_BROKER (the broker URL), TARRY_TEST_CELERY_DB (the database URL) and
TARRY_TEST_CELERY_QUEUE (a queue of the test's own); TARRY_TEST_CELERY_LEASE (seconds, default 3) and
TARRY_TEST_CELERY_LOG (set: ``tarry.jobs`` logs at INFO to standard error).
"""

from __future__ import annotations

import logging
import os
import sys

from celery import Celery

from tarry.jobs.celery import register
from tests.jobs.tools import clerk


def make_app(broker: str, url: str) -> Celery:
    """A Celery app on ``broker`` whose ``tarry.continue_chat`` carries the clerk's chats in ``url`` on."""
    app = Celery("tarry-tests", broker=broker)
    app.conf.update(
        task_default_queue=os.environ.get("TARRY_TEST_CELERY_QUEUE", "tarry-tests"),
        broker_connection_retry_on_startup=True,
        worker_prefetch_multiplier=1,
        broker_transport_options={"visibility_timeout": 8},  # Redis: redeliver a killed worker's tasks soon
        worker_hijack_root_logger=False,
    )
    lease = float(os.environ.get("TARRY_TEST_CELERY_LEASE", "3"))
    register(app, [clerk()], url=url, lease=lease, sweep_interval=2.0)
    return app


broker = os.environ.get("TARRY_TEST_CELERY_BROKER")
app = make_app(broker, os.environ["TARRY_TEST_CELERY_DB"]) if broker else Celery("tarry-tests")
if os.environ.get("TARRY_TEST_CELERY_LOG"):
    logging.getLogger("tarry.jobs").setLevel(logging.INFO)
    logging.getLogger("tarry.jobs").addHandler(logging.StreamHandler(sys.stderr))
