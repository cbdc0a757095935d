"""Celery workers on RabbitMQ and on Redis carry 200 chats on, one worker killed midway."""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path

import pytest

from tests.jobs.helpers import (
    CHATS,
    create_orders,
    kill_one_midway_then_check,
    start,
    start_proc,
)
from tests.jobs.tools import random_orders

BROKERS = {"rabbitmq": "TARRY_TEST_RABBITMQ_URL", "redis": "TARRY_TEST_REDIS_URL"}


@pytest.mark.parametrize("broker", sorted(BROKERS))
async def test_celery_workers_one_killed_carry_every_chat_on_exactly_once(
    broker: str, postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker_url = os.environ.get(BROKERS[broker])
    if not broker_url:
        pytest.skip(f"Celery tests on {broker} need {BROKERS[broker]} (e.g. .ci/run's value) and a running broker")
    pytest.importorskip("celery", reason="Celery tests need celery: pip install -e '.[test]'")
    monkeypatch.setenv("TARRY_TEST_CELERY_BROKER", broker_url)
    monkeypatch.setenv("TARRY_TEST_CELERY_DB", postgres_url)
    monkeypatch.setenv("TARRY_TEST_CELERY_QUEUE", f"tarry-test-{uuid.uuid4().hex[:8]}")
    from tarry.jobs.celery import enqueue
    from tests.jobs.celery_app import make_app

    markers = tmp_path / "markers"
    chat_ids = await create_orders(postgres_url, random_orders(CHATS, seed=7, longest=3.0), poll=0.5)
    app = make_app(broker_url, postgres_url)
    for chat_id in chat_ids.values():  # the chats parked in this process: their builds need checking
        enqueue(app, chat_id)
    command = [sys.executable, "-m", "celery", "-A", "tests.jobs.celery_app", "worker", "--pool", "threads",
               "--concurrency", "4", "--loglevel", "WARNING", "--without-gossip", "--without-mingle",
               "--without-heartbeat"]  # fmt: skip
    workers = [start([*command, "-n", f"w{number}@%h"], markers) for number in range(4)]
    answerer = start_proc(markers, "answer", postgres_url, str(2 * CHATS), "2", "0.01", broker_url)
    await kill_one_midway_then_check(postgres_url, markers, workers, answerer, chat_ids, first_answers_within=150)
