"""Celery workers check working tasks in batches (``tarry.check_tasks``), one worker SIGKILLed mid-checks, on a
SQLite file and on PostgreSQL: no two checks of a task overlap, none is lost, none stuck (``tests.jobs.counting``)."""

from __future__ import annotations

import os
import re
import sys
import uuid
from pathlib import Path

import pytest

from tests.jobs.counting import counting_chats, kill_one_while_counting_then_check
from tests.jobs.helpers import markers_of, start


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
async def test_celery_workers_check_tasks_in_batches_one_killed_never_overlap_lose_a_check_or_stick(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker_url = os.environ.get("TARRY_TEST_RABBITMQ_URL")
    if not broker_url:
        pytest.skip("Celery tests need TARRY_TEST_RABBITMQ_URL (e.g. .ci/run's value) and a running RabbitMQ")
    pytest.importorskip("celery", reason="Celery tests need celery: pip install -e '.[test]'")
    url = f"sqlite:///{tmp_path / 'jobs.db'}" if kind == "sqlite" else request.getfixturevalue("postgres_url")
    for name, value in {"BROKER": broker_url, "DB": url, "LEASE": "2", "LOG": "1"}.items():
        monkeypatch.setenv(f"TARRY_TEST_CELERY_{name}", value)
    monkeypatch.setenv("TARRY_TEST_CELERY_QUEUE", f"tarry-test-{uuid.uuid4().hex[:8]}")
    markers = tmp_path / "markers"
    orders = await counting_chats(url)  # parked, due: no message sent, the workers' looks for due chats find them
    command = [sys.executable, "-m", "celery", "-A", "tests.jobs.celery_app", "worker", "--pool", "threads",
               "--concurrency", "4", "--loglevel", "WARNING", "--without-gossip", "--without-mingle",
               "--without-heartbeat"]  # fmt: skip
    workers = [start([*command, "-n", f"w{number}@%h"], markers) for number in range(2)]
    await kill_one_while_counting_then_check(url, markers, workers, orders)

    # Most checks ran in batches, not in a full chat step each.
    logs = "".join(path.read_text() for path in tmp_path.glob("process-*.err"))
    batched = sum(int(found) for found in re.findall(r"Checked (\d+) task\(s\) of \d+ chat\(s\) in a batch", logs))
    assert batched >= len(markers_of(markers, "count-end")) // 2, f"only {batched} checks ran in batches"
