"""Celery beat sends ``tarry.deliver_notices`` and a Celery worker on Redis delivers the webhook of a question asked."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tarry.store import Store
from tests.notify.conftest import ROOT, Receiver, environment
from tests.store.test_approve_all import transfer, turn_of


async def test_a_celery_worker_with_beat_delivers_the_webhook_of_a_question_asked(
    postgres_url: str, receiver: Receiver, tmp_path: Path
) -> None:
    broker = os.environ.get("TARRY_TEST_REDIS_URL")
    if not broker:
        pytest.skip("this Celery test needs TARRY_TEST_REDIS_URL (e.g. .ci/run's value) and a running Redis")
    async with Store(postgres_url) as store:
        await store.setup()
        _, (question,) = await turn_of(store, [transfer("Bob")])
    env = {
        **environment(),
        "TARRY_TEST_CELERY_BROKER": broker,
        "TARRY_TEST_CELERY_DB": postgres_url,
        "TARRY_TEST_CELERY_QUEUE": f"tarry-notify-{uuid.uuid4().hex[:8]}",
        "TARRY_TEST_WEBHOOK": receiver.url,
    }
    worker = start_worker(env, tmp_path)
    try:
        (got,) = await asyncio.to_thread(receiver.wait_for, 1, 60)
    finally:
        worker.terminate()
        worker.wait(timeout=60)

    assert (got["type"], got["question"], got["verified"]) == ("question.asked", question.id, True)
    async with Store(postgres_url) as store:
        (delivery,) = await store.deliveries()
    assert (delivery.id, delivery.state) == (got["id"], "sent")


async def test_without_beat_a_workers_watch_of_the_outbox_sends_each_question_on(
    postgres_url: str, receiver: Receiver, tmp_path: Path
) -> None:
    broker = os.environ.get("TARRY_TEST_RABBITMQ_URL")
    if not broker:
        pytest.skip("this Celery test needs TARRY_TEST_RABBITMQ_URL (e.g. .ci/run's value) and a running RabbitMQ")
    async with Store(postgres_url) as store:
        await store.setup()
    env = {
        **environment(),
        "TARRY_TEST_CELERY_BROKER": broker,
        "TARRY_TEST_CELERY_DB": postgres_url,
        "TARRY_TEST_CELERY_QUEUE": f"tarry-notify-{uuid.uuid4().hex[:8]}",
        "TARRY_TEST_CELERY_WATCH_ONLY": "1",
        "TARRY_TEST_WEBHOOK": receiver.url,
    }
    worker = start_worker(env, tmp_path, beat=False)
    try:
        asked = []
        async with Store(postgres_url) as store:
            for name in ("Bob", "Carol", "Dan"):  # one after another, each asked once the last was delivered
                _, (question,) = await turn_of(store, [transfer(name)])
                asked.append(question.id)
                got = await asyncio.to_thread(receiver.wait_for, len(asked), 60)
                assert [item["question"] for item in got] == asked
    finally:
        worker.terminate()
        worker.wait(timeout=60)
    assert {item["type"] for item in got} == {"question.asked"} and all(item["verified"] for item in got)


def start_worker(env: dict[str, str], tmp_path: Path, *, beat: bool = True) -> subprocess.Popen[bytes]:
    """A Celery worker of ``tests.notify.celery_app``, with beat in it unless ``beat`` is false."""
    command = [sys.executable, "-m", "celery", "-A", "tests.notify.celery_app", "worker", *(["-B"] if beat else []),
               "--pool", "threads", "--concurrency", "2", "--loglevel", "WARNING", "--without-gossip",
               "--without-mingle", "--without-heartbeat", "-s", str(tmp_path / "beat-schedule")]  # fmt: skip
    with (tmp_path / "celery.log").open("w") as log:
        return subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=log)
