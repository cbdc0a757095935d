"""The Celery app of the follow-up test: ``celery -A tests.jobs.follow_up_app worker``, its clock moved ahead.

TARRY_TEST_CELERY_BROKER, TARRY_TEST_CELERY_DB and TARRY_TEST_CELERY_QUEUE as for ``tests.jobs.celery_app``;
TARRY_TEST_CLOCK_AHEAD: how many seconds this worker's clock is moved ahead (so an approval has timed out for it).
"""

from __future__ import annotations

import os

from celery import Celery

from tarry.jobs.celery import register
from tarry.testing import advance_clock
from tests.store.sweepers import refunds


def make_app(broker: str, url: str) -> Celery:
    """A Celery app on ``broker`` that carries the refunds' chats in ``url`` on and sweeps follow-ups every 0.5 s."""
    app = Celery("tarry-follow-ups", broker=broker)
    app.conf.update(
        task_default_queue=os.environ.get("TARRY_TEST_CELERY_QUEUE", "tarry-tests"),
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
    )
    register(app, [refunds()], url=url, lease=3.0, sweep_interval=0.5)
    return app


advance_clock(float(os.environ.get("TARRY_TEST_CLOCK_AHEAD", "0")))
broker = os.environ.get("TARRY_TEST_CELERY_BROKER")
app = make_app(broker, os.environ["TARRY_TEST_CELERY_DB"]) if broker else Celery("tarry-follow-ups")
