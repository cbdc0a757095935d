"""A Celery app that carries the calls of an MCP server (``tarry.mcp_server.serve``) on.

``celery -A tests.jobs.served_celery_app worker`` with TARRY_TEST_CELERY_BROKER,
TARRY_TEST_CELERY_DB and TARRY_TEST_CELERY_QUEUE set, as for ``tests.jobs.celery_app``.
"""

from __future__ import annotations

import os
from pathlib import Path

from celery import Celery

from tarry import Task, Tool
from tarry.jobs.celery import register
from tarry.mcp_server import served_agent
from tests.store.tools import mark


class Bake(Tool):
    """Bakes a cake that is done once its file exists; each run leaves a marker naming its process."""

    def execute(self, cake: str) -> Task:
        mark("execute", str(os.getpid()))
        return Task(status_message="in the oven", poll_interval=0.2, data={"cake": cake})

    def resume(self, task: Task, cake: str) -> str | Task:
        if not Path(cake).exists():
            return Task(status_message="still in the oven", poll_interval=0.2, data=task.data)
        mark("done", str(os.getpid()))
        return f"baked {cake}"


TOOLS = [Bake()]


def make_app(broker: str, url: str) -> Celery:
    """A Celery app on ``broker`` whose ``tarry.continue_chat`` carries the served calls in ``url`` on."""
    app = Celery("tarry-served-tests", broker=broker)
    app.conf.update(
        task_default_queue=os.environ.get("TARRY_TEST_CELERY_QUEUE", "tarry-tests"),
        broker_connection_retry_on_startup=True,
        worker_prefetch_multiplier=1,
        worker_hijack_root_logger=False,
    )
    register(app, [served_agent(TOOLS)], url=url, lease=3.0, sweep_interval=2.0)
    return app


broker = os.environ.get("TARRY_TEST_CELERY_BROKER")
app = make_app(broker, os.environ["TARRY_TEST_CELERY_DB"]) if broker else Celery("tarry-served-tests")
