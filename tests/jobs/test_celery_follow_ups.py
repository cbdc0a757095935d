"""A Celery worker records an approval's decline on timeout and carries its chat on (on RabbitMQ and Redis)."""

from __future__ import annotations

import asyncio
import os
import sys
import time
import uuid
from pathlib import Path

import pytest

from tarry.store import Store
from tests.jobs.helpers import finish
from tests.jobs.helpers import start as start_process
from tests.store.sweepers import TTL, refunds

BROKERS = {"rabbitmq": "TARRY_TEST_RABBITMQ_URL", "redis": "TARRY_TEST_REDIS_URL"}


@pytest.mark.parametrize("broker", sorted(BROKERS))
async def test_a_celery_worker_declines_on_timeout_and_carries_the_chat_on(
    broker: str, postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker_url = os.environ.get(BROKERS[broker])
    if not broker_url:
        pytest.skip(f"Celery tests on {broker} need {BROKERS[broker]} (e.g. .ci/run's value) and a running broker")
    pytest.importorskip("celery", reason="Celery tests need celery: pip install -e '.[test]'")
    monkeypatch.setenv("TARRY_TEST_CELERY_BROKER", broker_url)
    monkeypatch.setenv("TARRY_TEST_CELERY_DB", postgres_url)
    monkeypatch.setenv("TARRY_TEST_CELERY_QUEUE", f"tarry-test-{uuid.uuid4().hex[:8]}")
    monkeypatch.setenv("TARRY_TEST_CLOCK_AHEAD", str(TTL + 1))
    async with Store(postgres_url) as store:
        await store.setup()
        chat = await store.create_chat(agent=refunds())
        await chat.ask("Refund Carol")
        [question] = await store.pending_questions(chat.id)
    command = [sys.executable, "-m", "celery", "-A", "tests.jobs.follow_up_app", "worker", "--pool", "threads",
               "--concurrency", "2", "--loglevel", "WARNING", "--without-gossip", "--without-mingle",
               "--without-heartbeat"]  # fmt: skip
    worker = start_process([*command, "-n", "followups@%h"], tmp_path / "markers")
    try:
        async with Store(postgres_url) as store:
            deadline = time.monotonic() + 90
            while (await store.messages(chat.id))[-1].content != "All done.":
                assert time.monotonic() < deadline, "the Celery worker never carried the declined chat on"
                assert worker.poll() is None, "the Celery worker exited"
                await asyncio.sleep(0.1)
            declined = await store.question(question.id)
            messages = await store.messages(chat.id)
    finally:
        worker.terminate()
        finish(worker)
    assert (declined.decision, declined.channel, declined.note) == ("decline", "policy", "Nobody decided in time.")
    assert "its policy declined it" in messages[2].content
